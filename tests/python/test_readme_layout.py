"""Issue 32: README's Layout block is what scripts/readme_layout.py generates from the tree (the layers
and their dependencies as CMakeLists.txt declares them, the top-level directories), so it cannot fall
behind a new layer or directory."""
import re
import subprocess
import sys

from conftest import ROOT


def test_readme_layout_is_generated_from_the_tree():
    generated = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_layout.py")], capture_output=True,
                               text=True, check=True).stdout
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Layout\n.*?```\n(.*?)```", readme, re.S).group(1)
    assert block == generated, "README.md's Layout is stale: paste the output of scripts/readme_layout.py"
    cmake = (ROOT / "CMakeLists.txt").read_text()
    for layer in re.findall(r'^  "([a-z]+)', cmake, re.M):
        assert re.search(rf"^  {layer} +←", block, re.M), layer
    assert "docs/architecture.md" in readme
