"""The shipped cluster configurations parse and keep their promises; --dry-run plans without running."""

import re
from pathlib import Path

import ray
import yaml

from sweeps.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "cluster" / "configs"


def test_cluster_launcher_config():
    config = yaml.safe_load((CONFIGS / "ray-cluster.aws.yaml").read_text())
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    assert {"cpu_worker", "gpu_worker"} <= set(types)
    assert types[config["head_node_type"]]["resources"] == {"CPU": 0}
    head, workers = " ".join(config["head_start_ray_commands"]), " ".join(config["worker_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in head and "RAY_AUTH_MODE=token" in workers
    assert "--dashboard-host=127.0.0.1" in head
    assert any("pip install" in c and "fade-sweep" in c for c in config["setup_commands"])
    assert "/home/ubuntu/.ray/auth_token" in config["file_mounts"]


def test_kuberay_manifest():
    documents = list(yaml.safe_load_all((CONFIGS / "raycluster.kuberay.yaml").read_text()))
    claim = next(d for d in documents if d["kind"] == "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    cluster = next(d for d in documents if d["kind"] == "RayCluster")
    assert cluster["spec"]["rayVersion"] == ray.__version__
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "gpu"}
    gpu = groups["gpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == "1"
    pods = [cluster["spec"]["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in groups.values())]
    for pod in pods:
        container = pod["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token" and "secretKeyRef" in env["RAY_AUTH_TOKEN"]["valueFrom"]
        assert {"name": "results", "mountPath": "/results"} in container["volumeMounts"]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_dry_run_prints_plan_and_estimate_without_running(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "dry", "task": "linear_tracking", "task_settings": {"steps": 100000}, "seeds": 4,
        "optimizers": {"sgd": {"alpha": [0.01, 0.02]}, "fade": {"alpha": 0.05, "theta_lambda": [0.01, 0.02], "gamma0": -2.3}},
    }))
    assert main(["run", str(sweep), "--dry-run", "--num-cpus", "2", "--storage", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    planned = re.search(r"Plan for sweep dry: (\d+) packs, 16 runs, 1.600e\+06 run-steps; each pack asks for 1 CPU; "
                        r"2 CPU packs at once", out)
    assert planned and int(planned.group(1)) >= 2, out  # a pack per slot at least
    assert "fade" in out and "sgd" in out and "Estimated wall time:" in out
    assert not (tmp_path / "r").exists()
    assert main(["run", str(sweep), "--dry-run", "--num-cpus", "2", "--cpus-per-pack", "4"]) == 2
    assert "--cpus-per-pack 4 is more than the 2 CPUs" in capsys.readouterr().err
