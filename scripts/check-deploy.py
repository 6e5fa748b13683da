#!/usr/bin/env python3
"""Checks the container and its manifests as far as a machine without a container engine or a
cluster allows (docs/deploy.md):

1. the Dockerfile's runtime stage without a container engine: the release binary (`cargo build
   --release --locked`, as the build stage runs it; --no-build takes target/release/lazybatch as
   it is, as CI does after its test build), the stage's files copied where the image puts them,
   then the image's ENTRYPOINT + CMD run from the staged binary in the staged root (not the
   checkout: nothing of the repository is read at run time), its ports moved to free ones, and
   each manifest's container args run the same way: each must serve, answer the routes the
   manifests probe (startup, readiness, liveness, Prometheus) with 200, and stop on SIGTERM;
2. the manifests: the Deployment and Service against Kubernetes' own schemas
   (PyPI `kubernetes-validate`, installed when missing), and the KServe resources against the
   fields KServe reads (protocol v2, the runtime's name in the InferenceService, the container
   port the Dockerfile exposes, the probes' and Prometheus's port and path).

Prints one line per check and exits 1 when any failed.
Usage: scripts/check-deploy.py [--no-build]
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import yaml
except ImportError:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "pyyaml"], check=True)
    import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
failed = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what)
    if not ok:
        failed.append(what)


def dockerfile():
    """The runtime stage's ENTRYPOINT, CMD and EXPOSEd ports, and the COPY lines of the stage."""
    text = open(os.path.join(ROOT, "Dockerfile")).read()
    stage = text.split("AS runtime", 1)[1].split("\nFROM ", 1)[0]
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", stage, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", stage, re.M).group(1))
    ports = [int(p) for p in re.search(r"^EXPOSE (.*)$", stage, re.M).group(1).split()]
    copies = re.findall(r"^COPY (?!--from)(\S+) (\S+)$", stage, re.M)
    return entry, cmd, ports, copies


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url):
    try:
        with OPENER.open(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def serve(binary, args, cwd, what, paths):
    """Starts `binary args` in `cwd`, waits for readiness, checks each path answers 200, stops
    it (killed, whatever happens here)."""
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen([binary, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            port = next(int(a.rsplit(":", 1)[1]) for a in args if re.match(r"^[\d.]+:\d+$", a))
            base = f"http://127.0.0.1:{port}"
            t0 = time.time()
            while time.time() - t0 < 60 and p.poll() is None and status(f"{base}/v2/health/ready") != 200:
                time.sleep(0.2)
            if p.poll() is not None:
                err.seek(0)
                check(False, f"{what}: exited ({p.returncode}): {err.read().strip()[-300:]}")
                return
            for path in paths:
                check(status(base + path) == 200, f"{what}: GET {path} answers 200")
            p.terminate()
            try:
                p.wait(timeout=40)
                check(p.returncode == 0, f"{what}: stops cleanly on SIGTERM (exit {p.returncode})")
            except subprocess.TimeoutExpired:
                check(False, f"{what}: did not stop within 40 s of SIGTERM")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def main():
    build = "--no-build" not in sys.argv[1:]
    entry, cmd, exposed, copies = dockerfile()
    binary = os.path.join(ROOT, "target/release/lazybatch")
    if build or not os.path.exists(binary):
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    stage = tempfile.mkdtemp(prefix="lazybatch-image-")
    try:
        # the runtime stage's files where it puts them
        bin_dir = os.path.join(stage, "usr/local/bin")
        os.makedirs(bin_dir)
        staged = os.path.join(bin_dir, "lazybatch")
        shutil.copy2(binary, staged)
        for src, dst in copies:
            shutil.copytree(os.path.join(ROOT, src), os.path.join(stage, dst.lstrip("/")))
        check(entry[0] == "lazybatch", "image: the entrypoint is the staged binary")
        manifests = {}
        for f in ["deploy/kserve/cluster-serving-runtime.yaml", "deploy/kserve/inference-service.yaml",
                  "deploy/plain/deployment.yaml"]:
            for doc in yaml.safe_load_all(open(os.path.join(ROOT, f))):
                manifests[(doc["kind"], f)] = doc
        docs = {k: v for (k, _), v in manifests.items()}
        # every (port) the image listens on is one it exposes
        listens = [int(a.rsplit(":", 1)[1]) for a in entry if re.match(r"^[\d.]+:\d+$", a)]
        check(sorted(listens) == sorted(exposed), f"image: listens on {listens}, exposes {exposed}")

        def moved(args):
            # the image's addresses on free local ports
            return [re.sub(r"^0\.0\.0\.0:\d+$", lambda _: f"127.0.0.1:{free_port()}", a) for a in args]

        probes = ["/v2/health/ready", "/v2/health/live", "/metrics", "/v2"]
        serve(staged, moved(entry[1:] + cmd), stage, "image (ENTRYPOINT + CMD)", probes + ["/v2/models/resnet50"])
        dep = docs["Deployment"]["spec"]["template"]
        c = dep["spec"]["containers"][0]
        serve(staged, moved(entry[1:] + c["args"]), stage, "plain Deployment's args", probes)
        rt = docs["ClusterServingRuntime"]["spec"]
        rc = rt["containers"][0]
        args = [a if a != "/mnt/models/model.onnx" else os.path.join(ROOT, "tests/fixtures/onnx/resnet_style.onnx")
                for a in rc["args"]]
        serve(staged, moved(entry[1:] + args), stage, "KServe runtime's args (its model: a fixture)", probes)

        # the plain manifests against Kubernetes' schemas
        try:
            import kubernetes_validate  # noqa: F401
        except ImportError:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "kubernetes-validate"], check=True)
        for (kind, f), doc in manifests.items():
            if kind in ("Deployment", "Service"):
                p = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.32.0",
                                    os.path.join(ROOT, f)], capture_output=True, text=True)
                check(p.returncode == 0, f"{f}: valid against Kubernetes 1.32's schemas {p.stdout.strip()[-200:]}")
                break
        # the manifests against what the server answers and the image exposes
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        check(sorted(ports.values()) == sorted(exposed), "Deployment: its container ports are the image's")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            g = c[probe]["httpGet"]
            check(g["path"] in probes and ports.get(g["port"], g["port"]) == 8080,
                  f"Deployment: {probe} on {g['path']} at the HTTP port")
        a = dep["metadata"]["annotations"]
        check(a.get("prometheus.io/scrape") == "true" and a.get("prometheus.io/port") == "8080"
              and a.get("prometheus.io/path") == "/metrics", "Deployment: Prometheus scrapes /metrics on 8080")
        grace = dep["spec"]["terminationGracePeriodSeconds"]
        drain = int(c["args"][c["args"].index("--shutdown-timeout-s") + 1])
        check(grace > drain, f"Deployment: the grace period ({grace} s) outlasts serve's drain ({drain} s)")
        svc = docs["Service"]["spec"]
        check({p["targetPort"] for p in svc["ports"]} <= set(ports), "Service: targets the container's ports")
        # KServe's resources: the fields KServe reads
        check(docs["ClusterServingRuntime"]["apiVersion"] == "serving.kserve.io/v1alpha1", "runtime: apiVersion")
        check("v2" in rt["protocolVersions"], "runtime: speaks protocol v2")
        check(rc["name"] == "kserve-container", "runtime: its container is kserve-container")
        check([p["containerPort"] for p in rc["ports"]] == [8080], "runtime: HTTP on the image's 8080")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            g = rc[probe]["httpGet"]
            check(g["path"] in probes and g["port"] == 8080, f"runtime: {probe} on {g['path']}")
        ann = rt["annotations"]
        check(ann.get("prometheus.kserve.io/port") == "8080" and ann.get("prometheus.kserve.io/path") == "/metrics",
              "runtime: Prometheus on /metrics at 8080")
        isvc = docs["InferenceService"]
        m = isvc["spec"]["predictor"]["model"]
        check(isvc["apiVersion"] == "serving.kserve.io/v1beta1", "InferenceService: apiVersion")
        check(m["runtime"] == docs["ClusterServingRuntime"]["metadata"]["name"], "InferenceService: names the runtime")
        check(m["protocolVersion"] == "v2", "InferenceService: protocol v2")
        check(m["modelFormat"]["name"] in {f["name"] for f in rt["supportedModelFormats"]},
              "InferenceService: a model format the runtime supports")
        check(isvc["metadata"]["annotations"].get("serving.kserve.io/enable-prometheus-scraping") == "true",
              "InferenceService: Prometheus scraping on")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    print(f"check-deploy: {len(failed)} failed" if failed else "check-deploy: every check passed")
    print("not exercised here: a container build or run (no container engine), a cluster, KServe's own admission")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
