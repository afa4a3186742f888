"""docs/python.md stays true: its Python blocks run, in order, in a fresh folder."""
import importlib.util
import os
import re

from conftest import REPO, cli_path


def test_the_tutorial_runs_from_top_to_bottom(workdir, monkeypatch, capsys):
    cli_path()  # skips when the tool is not built
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) >= 8
    folder = os.path.join(workdir, "tutorial")
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    namespace = {}
    ran = 0
    for block in blocks:
        if "matplotlib" in block and not has_matplotlib:
            continue
        code = block.replace('REPO = os.path.abspath(".")', f"REPO = {REPO!r}")
        if "matplotlib" in code:
            code = "import matplotlib\nmatplotlib.use('Agg')\n" + code
        exec(compile(code, "docs/python.md", "exec"), namespace)
        ran += 1
    out = capsys.readouterr().out
    assert "dominated share" in out and "median A" in out
    # Everything the tutorial writes goes under out/ (git-ignored), nothing into the folder it runs in.
    assert os.path.exists("out/waterfill_level.png") and os.path.exists("out/mine.safetensors")
    assert sorted(os.listdir(".")) == ["out"]
    assert ran >= len(blocks) - 1
