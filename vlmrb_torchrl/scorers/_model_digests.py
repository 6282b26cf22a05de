"""SHA-256 digests of the model files the package ships (``vlmrb_torchrl/scorers/models/<directory>``), checked
whenever a built-in scorer is built (:func:`~vlmrb_torchrl.scorers.builtin.check_builtin_model`). Every file but
``MODEL_CARD.md`` and ``training.json`` (documentation) is listed. A model rebuilt and shipped updates its entry
here in the same commit: ``tests/scorers/test_builtin_digests.py`` fails (printing the new entries) until it does.
"""

from __future__ import annotations

#: Per model directory, each checked file's SHA-256.
BUILTIN_MODEL_DIGESTS: dict[str, dict[str, str]] = {
    'atari': {
        'config.json': '24bfeadc7cfb3dbddeb656c85875f2a90d7cc5a557c590ecd398578a16d5307a',
        'model.safetensors': '5867e83a5391aaa1734e412bf4e89fbe0c01296914a72e3e4a8786180313a28e',
        'processor_config.json': 'fee6c42e8b2018a331f286c8c16eace3b698dd30b523552ee97695d0ec433fbd',
        'tokenizer.json': '950c8c74786d8a816e70f8f3dbbf57da1d96d5f303ce8fe609ed07b077a56897',
        'tokenizer_config.json': '70afafb852183accc38c67ee3105fce2a73b9f41e2fc9da9acdd8b82e2ba511e',
    },
    'lift': {
        'config.json': 'a877a080f81ec6767f1b67a26ddabea8e26eba9609982f7ca2667078d05db397',
        'model.safetensors': 'f28b85867558ec6a99133aa4ffed077e2f6b5d65dab6d01e73412a15cfcdd937',
        'processor_config.json': 'fee6c42e8b2018a331f286c8c16eace3b698dd30b523552ee97695d0ec433fbd',
        'tokenizer.json': '96609f3dd31710d08c90a2fdfe94b59a4b65b1d88d31a83e834d3c291292170f',
        'tokenizer_config.json': '70afafb852183accc38c67ee3105fce2a73b9f41e2fc9da9acdd8b82e2ba511e',
    },
    'lift_hand': {
        'config.json': 'a877a080f81ec6767f1b67a26ddabea8e26eba9609982f7ca2667078d05db397',
        'model.safetensors': '15ce4f2a5900f6289ae809fcf1d9db6706eb7c609a9542551236b90f7412b3d8',
        'processor_config.json': 'fee6c42e8b2018a331f286c8c16eace3b698dd30b523552ee97695d0ec433fbd',
        'tokenizer.json': '96609f3dd31710d08c90a2fdfe94b59a4b65b1d88d31a83e834d3c291292170f',
        'tokenizer_config.json': '70afafb852183accc38c67ee3105fce2a73b9f41e2fc9da9acdd8b82e2ba511e',
    },
    'minigrid': {
        'config.json': '9ee60686713300e7b3231d9293be3005091773537fa5af345062264bb6d491bd',
        'model.safetensors': 'a2fb675fa4a0fdc8159a6c8215f58d2fed9fcdb4ed3d7374e11652d06d647ffe',
        'processor_config.json': 'fee6c42e8b2018a331f286c8c16eace3b698dd30b523552ee97695d0ec433fbd',
        'tokenizer.json': '924732e2c9e45275164cc1685fe33b5b42f3942122d034b7c117ddbabe642b7c',
        'tokenizer_config.json': '70afafb852183accc38c67ee3105fce2a73b9f41e2fc9da9acdd8b82e2ba511e',
    },
    'minigrid_agent': {
        'config.json': '14b03cf7defad3eb9b49ca46befd03304e6ca0a1e3b1ec5c023bd72347a70687',
        'model.safetensors': '98b94ee56c78b86dbc1726646221a59227c2e95e05bf1d15c8cceb83e156c9f7',
        'processor_config.json': 'fee6c42e8b2018a331f286c8c16eace3b698dd30b523552ee97695d0ec433fbd',
        'tokenizer.json': '4671207ae73329ec7ec73815240ad13b0ab096ef1152eba790c689100cca48aa',
        'tokenizer_config.json': '70afafb852183accc38c67ee3105fce2a73b9f41e2fc9da9acdd8b82e2ba511e',
    },
    'scene': {
        'config.json': '4e436ddd9abb00cc6032663a01574bed10877de9f01bd5a711c905f6f05a0e12',
        'model.safetensors': 'bf2b39592abe4997d5350c56c2640c17c2ecbe5a1b6b10a3e36510859c1d6fd1',
        'processor_config.json': 'fee6c42e8b2018a331f286c8c16eace3b698dd30b523552ee97695d0ec433fbd',
        'tokenizer.json': '3555534c00b1eb2b60803251f1e4d479737c5a58fb61ca4f61d8b4792f867d07',
        'tokenizer_config.json': '70afafb852183accc38c67ee3105fce2a73b9f41e2fc9da9acdd8b82e2ba511e',
    },
}
