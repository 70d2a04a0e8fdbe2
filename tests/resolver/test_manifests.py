"""Launch lines found in Kubernetes / Dynamo YAML and shell scripts, then checked."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from moonpin.resolver.args.manifests import (
    from_shell,
    from_yaml,
    read_file,
    sglang_version_of_image,
)
from moonpin.resolver.args.rules import Unresolved, check
from tests.resolver.test_launch_args import CUDA_OFF, JOINER, SCALE_UP, _release

DGD = """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: elastic
spec:
  services:
    Frontend:
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.6.0
          command: ["python3", "-m", "dynamo.frontend"]
    DecodeWorker:
      componentType: worker
{sibling}      extraPodSpec:
        mainContainer:
          image: lmsysorg/sglang:v0.5.18-cu130
          command: ["python3", "-m", "dynamo.sglang"]
          args: {args}
"""


def _dgd(args: list[str], sibling: list[str] | None = None) -> str:
    sib = f"      args: {sibling!r}\n" if sibling else ""
    return DGD.format(args=repr(args).replace("'", '"'), sibling=sib.replace("'", '"'))


def test_dynamo_worker_args_are_found_with_their_line() -> None:
    found = from_yaml(_dgd(["--model-path", "m", "--tp", "8"]), "dgd.yaml")
    (la,) = found.launches  # the frontend runs no SGLang
    assert la.argv == ("--model-path", "m", "--tp", "8")
    assert la.launcher == "python3 -m dynamo.sglang"
    assert la.where == ("dgd.yaml:17 "
                        "spec.services.DecodeWorker.extraPodSpec.mainContainer.command")
    assert sglang_version_of_image(la.image) == "0.5.18"
    assert not found.findings


def test_args_in_a_sibling_mapping_are_reported_not_validated() -> None:
    found = from_yaml(_dgd(["--model-path", "m"], sibling=CUDA_OFF), "dgd.yaml")
    (problem,) = found.findings
    assert problem.where.startswith("dgd.yaml:14 spec.services.DecodeWorker.args")
    assert "outside any container" in problem.message
    assert "--cuda-graph-backend-decode disabled" in problem.message
    assert "extraPodSpec.mainContainer.args" in problem.fix
    (la,) = found.launches
    assert "--cuda-graph-backend-decode" not in la.argv  # the worker does not get them
    control = from_yaml(_dgd(["--model-path", "m", *CUDA_OFF]), "dgd.yaml")
    assert not control.findings and "--cuda-graph-backend-decode" in control.launches[0].argv


def test_kubernetes_containers_env_and_shell_wrappers() -> None:
    text = textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        spec:
          template:
            spec:
              initContainers:
                - name: check
                  image: my-image
                  command: ["moonpin", "check"]
              containers:
                - name: worker
                  image: my-image
                  env:
                    - {name: TP, value: "8"}
                    - name: IP
                      valueFrom: {fieldRef: {fieldPath: status.podIP}}
                  command: ["python3", "-m", "sglang.launch_server"]
                  args: ["--tp", "$(TP)", "--host", "$(IP)", "--port", "$$(PORT)"]
                - name: sidecar
                  image: my-image
                  command: ["/bin/bash", "-c"]
                  args:
                    - |
                      MODEL=deepseek
                      exec python3 -m sglang.launch_server --model-path $MODEL \\
                        --tp 4
        ---
        apiVersion: v1
        kind: Pod
        spec:
          containers:
            - name: entry
              image: lmsysorg/sglang:v0.5.17
              args: ["--model-path", "m", "--elastic-ep-backend", "mooncake"]
        """)
    found = from_yaml(text, "k.yaml")
    assert [la.argv for la in found.launches] == [
        ("--tp", "8", "--host", "$(IP)", "--port", "$(PORT)"),
        ("--model-path", "deepseek", "--tp", "4"),
        ("--model-path", "m", "--elastic-ep-backend", "mooncake"),
    ]
    first, wrapped, entry = found.launches
    assert isinstance(first.argv[3], Unresolved) and not isinstance(first.argv[1], Unresolved)
    assert any("$(IP)" in n for n in first.notes)
    assert "(sh -c)" in wrapped.where
    assert "entrypoint" in entry.launcher and entry.where.startswith("k.yaml:34 doc2.")
    assert sglang_version_of_image(entry.image) == "0.5.17"


def test_shell_script_variables_continuations_and_separators() -> None:
    script = textwrap.dedent("""\
        #!/bin/bash
        set -e
        export TP=8
        PORT=${PORT:-30000}
        echo starting; python3 -m sglang.launch_server --model-path "my model" \\
            --tp $TP --port ${PORT} --node-rank ${NODE_RANK} "$@" &  # background
        sglang serve deepseek --model-type llm --dp 2 | tee log
        python -m sglang.launch_server --tp 1 --model-path 'a "b"
        c'
        """)
    found = from_shell(script, "run.sh")
    a, b, c = found.launches
    assert a.where == "run.sh:5"
    assert a.argv[:6] == ("--model-path", "my model", "--tp", "8", "--port", "30000")
    assert a.argv[6] == "--node-rank" and isinstance(a.argv[7], Unresolved)
    assert isinstance(a.argv[8], Unresolved)  # "$@"
    assert any("passes on its own arguments" in n for n in a.notes)
    assert any("${PORT}" in n and "30000" in n for n in a.notes)
    assert b.argv == ("--model-path", "deepseek", "--dp", "2") and b.where == "run.sh:7"
    assert c.argv == ("--tp", "1", "--model-path", 'a "b"\nc') and c.where == "run.sh:8"


def test_an_unknown_value_makes_its_rules_not_checked() -> None:
    from moonpin.readers.launch.server_args import extract

    src = textwrap.dedent("""\
        class ServerArgs:
            pp_size: A[int, "PP"] = 1
            elastic_ep_backend: A[Optional[str], Arg(help="b", choices=["mooncake"])] = None

            def _handle_elastic_ep(self):
                if self.elastic_ep_backend is not None:
                    assert self.pp_size == 1, "PP must be 1"
        """)
    flags, rules, _ = extract(src)
    (v,) = check(rules, flags, ["--elastic-ep-backend", "mooncake", "--pp-size",
                                Unresolved("$PP")])
    assert v.status == "not checked" and "$PP" in v.why
    (v,) = check(rules, flags, ["--elastic-ep-backend", "mooncake", "--pp-size", "2"])
    assert v.status == "violated"  # control


def test_bad_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.yaml"
    bad.write_text("spec:\n  args: [--tp\n  other: 1\n")
    with pytest.raises(ValueError, match=r"x\.yaml:\d+: not valid YAML"):
        read_file(bad)


def test_yaml_never_constructs_objects(tmp_path: Path) -> None:
    evil = tmp_path / "evil.yaml"
    evil.write_text("args: !!python/object/apply:os.system ['touch pwned']\n")
    found = read_file(evil)  # composed as plain nodes; the tag is never acted on
    assert not found.launches and not (tmp_path / "pwned").exists()


# ------------------------------------------------------------------ seed cases, real 0.5.18


def _violated(version: str, argv: tuple[str, ...]) -> list[str]:
    flags, rules = _release(version)
    return [v.message for v in check(rules, flags, argv) if v.status == "violated"]


@pytest.mark.wheels
def test_seed_manifests_on_real_releases() -> None:
    cuda = "Elastic EP runtime scale-up requires decode and prefill CUDA graphs to be disabled."
    missing = from_yaml(_dgd(SCALE_UP), "a.yaml").launches[0].argv
    assert _violated("0.5.18", missing) == [cuda]
    assert _violated("0.5.14", missing) == []
    only_old = from_yaml(_dgd([*SCALE_UP, "--disable-cuda-graph"]), "b.yaml").launches[0].argv
    assert _violated("0.5.18", only_old) == []
    joiner = from_yaml(_dgd([*SCALE_UP, *CUDA_OFF, *JOINER.split()]), "c.yaml")
    assert _violated("0.5.18", joiner.launches[0].argv) == [
        "Elastic EP scale-up requires one joining TP group at --node-rank 1 (got 0)."]
    # the CUDA-graph flags in a sibling mapping: reported, and the worker's line misses them
    sib = from_yaml(_dgd(SCALE_UP, sibling=CUDA_OFF), "d.yaml")
    assert sib.findings and _violated("0.5.18", sib.launches[0].argv) == [cuda]


def test_alias_bombs_and_recursive_aliases_are_refused(tmp_path: Path) -> None:
    lol = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, cur in itertools.pairwise("abcdefghi"):
        lol.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lol) + "\n")
    with pytest.raises(ValueError, match=r"bomb\.yaml: too many nodes"):
        read_file(bomb)
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [*a]\n")
    with pytest.raises(ValueError, match=r"loop\.yaml: too many nodes or too deeply nested"):
        read_file(loop)
    fine = tmp_path / "fine.yaml"  # control: ordinary aliases are expanded
    fine.write_text("x: &args [--model-path, m]\nspec:\n  containers:\n"
                    "    - image: i\n      command: [python, -m, sglang.launch_server]\n"
                    "      args: *args\n")
    assert read_file(fine).launches[0].argv == ("--model-path", "m")


def test_binary_and_unreadable_files(tmp_path: Path) -> None:
    blob = tmp_path / "blob.yaml"
    blob.write_bytes(b"\x00\xff\xfe" * 100)
    with pytest.raises(ValueError, match="not valid YAML"):
        read_file(blob)
    script = tmp_path / "blob.sh"
    script.write_bytes(b"\x00\xff python -m sglang.launch_server --tp 2\n")
    (la,) = read_file(script).launches  # decoded with replacement, still read
    assert la.argv == ("--tp", "2")


def test_a_dynamo_services_envs_reach_its_containers() -> None:
    text = textwrap.dedent("""\
        spec:
          services:
            Worker:
              envs:
                - {name: DIST_INIT, value: "127.0.0.1:24555"}
              extraPodSpec:
                mainContainer:
                  image: lmsysorg/sglang:v0.5.18
                  command: [python3, -m, dynamo.sglang]
                  args: [--dist-init-addr, "$(DIST_INIT)", --tp, "$(TP)"]
        """)
    (la,) = from_yaml(text, "d.yaml").launches
    assert la.argv[:2] == ("--dist-init-addr", "127.0.0.1:24555")
    assert isinstance(la.argv[3], Unresolved)  # control: $(TP) is declared nowhere


# ----------------------------------------------------- bounded reading (issue 19)


@pytest.mark.parametrize("text", [
    "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "a: " + "{b: " * 5000 + "}" * 5000 + "\n",
])
def test_deep_flow_nesting_is_refused_before_composing(text: str) -> None:
    import time

    from moonpin.resolver.args.manifests import MAX_DEPTH, from_yaml

    t = time.monotonic()
    with pytest.raises(ValueError, match=f"nested 5000 deep \\(limit {MAX_DEPTH}\\)"):
        from_yaml(text, "deep.yaml")
    assert time.monotonic() - t < 2


def test_deep_block_nesting_is_a_valueerror() -> None:
    from moonpin.resolver.args.manifests import from_yaml

    text = "".join(" " * i + "k:\n" for i in range(3000))
    with pytest.raises(ValueError, match=r"deep\.yaml"):
        from_yaml(text, "deep.yaml")


def test_quoted_brackets_do_not_count_as_nesting() -> None:
    from moonpin.resolver.args.manifests import _flow_depth

    assert _flow_depth('a: "' + "[" * 500 + '"\nb: \'[[[[\'\nc: [[1]]\n') == 2


@pytest.mark.parametrize("text", [
    '"\n' + "x\n" * 50_000,  # a quote that never closes
    "python -m sglang.launch_server " + "\\" * 200_001 + "\n",
    "\n" * 1_000_000,
    ('"' + "x" * 100 + "\n" + ("y" * 100 + "\n") * 499) * 20,
])
def test_shell_scripts_are_read_in_linear_time(text: str) -> None:
    import time

    from moonpin.resolver.args.manifests import from_shell

    t = time.monotonic()
    from_shell(text, "s.sh")
    assert time.monotonic() - t < 10


def test_a_line_past_the_limit_is_named_not_tokenized() -> None:
    from moonpin.resolver.args.manifests import MAX_LINE, from_shell

    found = from_shell("python -m sglang.launch_server --model-path " + "a" * MAX_LINE, "s.sh")
    assert not found.launches
    assert [f.where for f in found.findings] == ["s.sh:1"]
    assert "not read" in found.findings[0].message


def test_continuations_and_carried_quotes_still_join() -> None:
    from moonpin.resolver.args.manifests import from_shell

    found = from_shell('A="1\n2"\npython -m sglang.launch_server --tp 2 \\\n  --ep $A\n'
                       "echo '\\\\' \\\\\npython -m sglang.launch_server --tp 4\n", "s.sh")
    assert [la.argv for la in found.launches] == [("--tp", "2", "--ep", "1", "2"),
                                                  ("--tp", "4")]


@pytest.mark.parametrize("special", ["fifo", "dev-zero", "directory", "sparse-huge"])
def test_an_args_file_that_is_not_a_file_is_oserror(tmp_path: Path, special: str) -> None:
    from moonpin.resolver.args.manifests import read_file
    from tests.hostile.gen import make_special

    f = tmp_path / "launch.yaml"
    make_special(special, f)
    with pytest.raises(OSError) as e:
        read_file(f)
    assert e.value.strerror and str(f) in str(e.value)
