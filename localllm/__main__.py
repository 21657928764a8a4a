"""``python -m localllm``: the same command as the ``localllm`` script (the daemon starts itself this way)."""

from localllm.cli.main import app

app(prog_name="localllm")
