"""The Docker files, checked statically (no Docker engine here): what each image installs and
runs, and how compose wires PostgreSQL, the Ray nodes, the dashboard and the CLI together."""

from __future__ import annotations

import re
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from hpsearch.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
IMAGES = ["Dockerfile", "Dockerfile.cuda"]


def _instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (DOCKER / name).read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _final_stage(name: str) -> list[tuple[str, str]]:
    steps = _instructions(name)
    last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
    return steps[last_from:]


@pytest.mark.parametrize("name", IMAGES)
def test_an_image_builds_the_wheel_and_installs_it_not_editable(name: str) -> None:
    steps = _instructions(name)
    build = " ".join(args for k, args in steps if k == "RUN")
    assert "python -m build --wheel" in build
    final = _final_stage(name)
    runs = " ".join(args for k, args in final if k == "RUN")
    assert "/tmp/wheels/hpsearch-*.whl" in runs and "[postgres]" in runs
    assert " -e " not in runs and "--editable" not in runs
    assert "-c /tmp/constraints.txt" in runs  # every install is pinned
    # Every COPY from the build context names a path that exists in the repository.
    for keyword, args in steps:
        if keyword == "COPY" and not args.startswith("--from"):
            *sources, _ = args.split()
            for source in sources:
                assert (ROOT / source).exists(), f"{name}: COPY {source}: no such path"


@pytest.mark.parametrize("name", IMAGES)
def test_an_image_runs_as_a_non_root_user_with_a_health_check(name: str) -> None:
    final = _final_stage(name)
    users = [args for k, args in final if k == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(k == "HEALTHCHECK" for k, _ in final)
    assert any(k == "ENTRYPOINT" and '"hpsearch"' in args for k, args in final)


PINS = ROOT / "constraints" / "tested.txt"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for number, line in enumerate(PINS.read_text().splitlines(), 1):
        line = line.split("#")[0].strip()
        if line:
            # pip refuses a constraint with extras ("Constraints cannot have extras") and a lock
            # holds one version a package: `name==version` and nothing else.
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.]+)", line)
            assert match, f"constraints/tested.txt line {number}: not name==version: {line}"
            pins[_canonical(match.group(1))] = match.group(2)
    return pins


def test_every_dependency_is_pinned_within_its_range_and_the_images_install_the_pins() -> None:
    from packaging.requirements import Requirement

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared += extra
    pins = _pins()
    for text in declared:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue  # not installed on this Python (tomli before 3.11)
        name = _canonical(requirement.name)
        assert name in pins, f"{requirement.name} is a dependency but constraints/tested.txt does not pin it"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints/tested.txt pins {requirement.name}=={pins[name]}, outside pyproject's {text!r}"
        )
    cpu_pin = re.search(r"torch==([\w.]+)", (ROOT / "constraints" / "cpu.txt").read_text())
    assert cpu_pin and pins["torch"] == cpu_pin.group(1)
    for name in IMAGES:
        copies = [args for k, args in _final_stage(name) if k == "COPY"]
        assert "constraints/tested.txt /tmp/constraints.txt" in copies, name


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the Makefile applies the pins from Python 3.11 on")
def test_the_tests_run_on_the_pinned_versions() -> None:
    from importlib.metadata import distributions

    pins = _pins()
    installed = {_canonical(d.metadata["Name"]): d.version for d in distributions()}
    # torch's local label (2.13.0+cpu) names the build, not the version.
    off = {
        name: (installed[name], pinned)
        for name, pinned in pins.items()
        if name in installed and installed[name].split("+")[0] != pinned
    }
    assert not off, f"installed, pinned: {off} (`make install` installs the pins again)"


def test_the_cuda_image_names_one_cuda_version() -> None:
    text = (DOCKER / "Dockerfile.cuda").read_text()
    tag = re.search(r"ARG CUDA_TAG=(\d+)\.(\d+)", text)
    assert tag and f"cu{tag.group(1)}{tag.group(2)}" in text  # the torch build it asks for


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _command(service: dict) -> list[str]:
    return [*service.get("entrypoint", []), *service.get("command", [])]


def test_compose_has_the_store_the_ray_nodes_the_dashboard_and_the_cli(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "ray-head", "ray-worker", "ray-gpu-worker", "dashboard", "hpsearch"}
    assert set(compose["volumes"]) == {"pgdata", "runs"}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source in compose["volumes"] or (DOCKER / source).resolve().is_dir(), f"{name}: {volume}"


def test_every_command_compose_runs_exists(compose: dict) -> None:
    import click

    # The core's commands and those installed packages plug in (the dashboard's `dashboard`).
    commands = set(cli.list_commands(click.Context(cli)))
    # The ray command comes with the ray package the image installs (a console script).
    ray_cli = [e for e in entry_points(group="console_scripts", name="ray") if e.dist and e.dist.name == "ray"]
    for name, service in compose["services"].items():
        argv = _command(service)
        if not argv:
            continue
        if argv[0] == "hpsearch":
            sub = [a for a in argv[1:] if not a.startswith("-")]
            assert not sub or sub[0] in commands, f"{name}: hpsearch {sub[0]} is not a command"
        else:
            assert argv[0] == "ray" and ray_cli, f"{name}: runs {argv[0]}"
            assert argv[1] == "start"


def test_compose_wires_the_store_and_the_ray_address(compose: dict) -> None:
    services = compose["services"]
    pg = services["postgres"]["environment"]
    storage = services["hpsearch"]["environment"]["HPSEARCH_STORAGE"]
    assert storage.startswith(f"postgresql+psycopg://{pg['POSTGRES_USER']}:")
    assert storage.endswith(f"@postgres:5432/{pg['POSTGRES_DB']}")
    head_port = next(a for a in _command(services["ray-head"]) if a.startswith("--port=")).split("=")[1]
    assert services["hpsearch"]["environment"]["RAY_ADDRESS"] == f"ray-head:{head_port}"
    for worker in ("ray-worker", "ray-gpu-worker"):
        assert f"--address=ray-head:{head_port}" in _command(services[worker])
        assert services[worker]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    # Trials' run folders are on one volume, at the same path on the driver and every node.
    for name in ("ray-head", "ray-worker", "hpsearch"):
        assert "runs:/data/runs" in services[name]["volumes"]


def test_gpu_workers_use_the_compose_gpu_syntax(compose: dict) -> None:
    gpu = compose["services"]["ray-gpu-worker"]
    assert gpu["profiles"] == ["gpu"] and gpu["build"]["dockerfile"] == "docker/Dockerfile.cuda"
    [device] = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


def test_the_dashboard_needs_a_token_and_is_published_on_loopback(compose: dict) -> None:
    dashboard = compose["services"]["dashboard"]
    assert _command(dashboard)[:2] == ["hpsearch", "dashboard"]
    assert "HPSEARCH_DASHBOARD_TOKEN" in dashboard["environment"]
    assert ":?" in dashboard["environment"]["HPSEARCH_DASHBOARD_TOKEN"]  # compose refuses to start without it
    assert all(p.startswith("127.0.0.1:") for p in dashboard["ports"])
    for name in ("postgres", "ray-head", "dashboard"):
        assert "healthcheck" in compose["services"][name], name
