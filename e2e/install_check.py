#!/usr/bin/env python3
"""Install vramfit on the cluster in KUBECONFIG the two documented ways and check the result.

Run with the interpreter of .venv/helm (helm-sdkpy: Helm v4's library; PyYAML):

    KUBECONFIG=~/.kube/config "$(bash scripts/helm-venv.sh)" e2e/install_check.py

Needs `kubectl` on PATH (or KUBECTL naming it) and cluster-admin credentials. The pods
need not run: no kubelet is required, except by the last check, which is skipped without
one. Checks, each reported as `PASS <name>`, `FAIL <name>: <expected vs seen>` or
`SKIP <name>: <why>`, then `install-check: N passed, M failed, K skipped`:

  deploy-server-side-apply            `kubectl apply --server-side -f deploy/`: no warning,
                                      every object exists; then removed again.
  helm-install-upgrade-uninstall      install, upgrade with changed values (the metrics
                                      NetworkPolicies on), uninstall (the CRDs are kept, as
                                      documented), through Helm's library.
  helm-refuses-kubectl-installed-crds CRDs applied with kubectl make `helm install` fail with
                                      Helm's ownership error; the README's migrations
                                      (kubectl -> Helm, Helm -> kubectl) work.
  agent-label-guard-enforced          as the agent's ServiceAccount: vramfit.io/ labels may
                                      change, nothing else on the Node may.
  inferencejob-pod-trust-enforced     as a ServiceAccount that may create InferenceJobs but
                                      not pods: spec.pod's serviceAccountName, volumes,
                                      env valueFrom, tolerations, priorityClassName, labels
                                      and annotations not on the install's allowed*Keys, and
                                      extended resources are denied (server-side dry run);
                                      one that may create pods passes; a hostPath volume and
                                      an AppArmor annotation (refused by the CRD) are denied
                                      to both. A served job's serviceType NodePort or
                                      LoadBalancer is denied, with the reason, to both and
                                      allowed to one that may create services; ClusterIP
                                      (or unset) to all three.
  aggregated-roles-extend-builtin     the chart's -edit/-view ClusterRoles are aggregated into
                                      the built-in edit and view roles (needs the controller
                                      manager).
  helm-install-on-a-real-node         the README's install into `vramfit` with the images
                                      VRAMFIT_OPERATOR_IMAGE / VRAMFIT_AGENT_IMAGE (default
                                      localhost/vramfit-{operator,agent}:dev) on a node whose
                                      kubelet runs them: the operator pods pass their probes,
                                      one holds the Lease; the agent labels the node from a
                                      GPU fixture in a ConfigMap; `helm upgrade` rolls both
                                      (the agent without the fixture: gpu.present=false, no
                                      restart); `helm uninstall` removes them. Skipped, saying
                                      why, without such a node.

The operator's own permissions (exactly operator/src/permissions.rs, checked with
`kubectl auth can-i --list` while it runs a job as its service account) are the e2e
suite's scenario `operator-under-chart-rbac`.

The chart is installed with images.allowTags (no kubelet pulls the images; values.yaml has
no digests between releases).

Each check removes what it created (namespaces `vramfit-install-<random>` and deploy/'s
`vramfit`, a Node `vramfit-install-<random>`, the releases, the CRDs it caused to exist),
whether it passes or not. The checks use the
cluster-scoped names of a default install (`vramfit-operator`, …): the cluster must not
hold another vramfit install.
"""

from __future__ import annotations

import os
import shutil
import tempfile

# Helm's Go runtime reads its environment once, when the library loads: keep its cache and
# configuration out of the user's home. Releases are stored as Secrets (Helm's default).
_HELM_HOME = tempfile.mkdtemp(prefix="vramfit-install-helm-")
for _var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
    os.environ[_var] = os.path.join(_HELM_HOME, _var.lower())

import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import secrets  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import helm_sdkpy  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "vramfit"
DEPLOY = ROOT / "deploy"
CRDS = ROOT / "crds"
KUBECTL = os.environ.get("KUBECTL", "kubectl")
RELEASE = "vramfit"
CRD_NAMES = ["gpunodeclasses.vramfit.io", "inferencejobs.vramfit.io", "modelcaches.vramfit.io"]
HELM_TIMEOUT_S = 90  # per Helm action
WAIT_S = 90  # a deletion
# Helm v4's `helm install` applies server-side by default; do what the README's command does.
SERVER_SIDE = True
# What Helm v4 checks before it adopts an existing object into a release.
HELM_OWNER_LABEL = "app.kubernetes.io/managed-by"
HELM_OWNER_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")


class CheckFailed(Exception):
    """A check's expectation was not met; the message says what was expected and seen."""


# ---------------------------------------------------------------------------- kubectl

@dataclass
class Run:
    rc: int
    out: str
    err: str


def kubectl(*args: str, stdin: str | None = None, timeout: float = 60) -> Run:
    """Run kubectl with a bounded time; never raises on a non-zero exit."""
    try:
        p = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Run(124, "", f"kubectl {' '.join(args)}: no answer within {timeout:.0f} s")
    return Run(p.returncode, p.stdout, p.stderr)


def kubectl_ok(*args: str, stdin: str | None = None, timeout: float = 60) -> str:
    r = kubectl(*args, stdin=stdin, timeout=timeout)
    if r.rc != 0:
        raise CheckFailed(f"`kubectl {' '.join(args)}` failed: {r.err.strip()}")
    return r.out


def get_json(*args: str) -> dict[str, Any] | None:
    """The object as JSON, or None when it does not exist."""
    r = kubectl("get", *args, "-o", "json", "--ignore-not-found")
    if r.rc != 0:
        raise CheckFailed(f"`kubectl get {' '.join(args)}` failed: {r.err.strip()}")
    return json.loads(r.out) if r.out.strip() else None


def ref(obj: dict[str, Any]) -> str:
    """`kind.group/name` as `kubectl get -o name` prints it (namespace added when set)."""
    group = obj["apiVersion"].rpartition("/")[0]
    kind = obj["kind"].lower() + (f".{group}" if group else "")
    ns = obj["metadata"].get("namespace")
    return f"{kind}/{obj['metadata']['name']}" + (f" -n {ns}" if ns else "")


def missing_on_server(objects: list[dict[str, Any]]) -> list[str]:
    """The objects of a manifest that the API server does not have."""
    missing = []
    for obj in objects:
        kind_name, _, ns = ref(obj).partition(" -n ")
        args = [kind_name] + (["-n", ns] if ns else [])
        if get_json(*args) is None:
            missing.append(ref(obj))
    return missing


def exists(obj: dict[str, Any]) -> bool:
    return not missing_on_server([obj])


def existing_crds() -> set[str]:
    return {name for name in CRD_NAMES if get_json("crd", name) is not None}


def wait_for(what: str, condition: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.2
    while not condition():
        if time.monotonic() > deadline:
            raise CheckFailed(f"{what}: not so after {timeout:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def delete(*refs: str, namespace: str | None = None) -> list[str]:
    """Delete and wait until gone; returns what is left (for the cleanup report)."""
    if not refs:
        return []
    ns = ["-n", namespace] if namespace else []
    r = kubectl("delete", *refs, *ns, "--ignore-not-found", "--wait=true", f"--timeout={WAIT_S}s",
                timeout=WAIT_S + 30)
    left = [x for x in refs if get_json(x, *ns) is not None]
    if r.rc != 0 or left:
        return [f"could not delete {', '.join(left) or ' '.join(refs)}: {r.err.strip()}"]
    return []


def delete_namespace(namespace: str) -> list[str]:
    """Force-delete its pods first: with no kubelet (or a node gone), a bound pod would stay
    Terminating and hold the namespace for ever."""
    if get_json("namespace", namespace) is None:
        return []
    kubectl("delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0",
            "--ignore-not-found", timeout=60)
    return delete(f"namespace/{namespace}")


@contextlib.contextmanager
def cleaning_up(cleanup: Callable[[], list[str]]) -> Iterator[None]:
    """try/finally that also reports: `cleanup` always runs, and what it could not remove
    fails the check (added to the check's own failure, if any)."""
    failure: BaseException | None = None
    try:
        yield
    except BaseException as e:
        failure = e
    try:
        problems = cleanup()
    except Exception as e:  # noqa: BLE001 - report it with the check's own failure
        problems = [f"{type(e).__name__}: {e}"]
    if problems:
        first = f"{failure}; " if failure else ""
        raise CheckFailed(f"{first}cleanup: {'; '.join(problems)}") from failure
    if failure:
        raise failure


def load_manifests(*paths: Path) -> list[dict[str, Any]]:
    return [doc for p in paths for doc in yaml.safe_load_all(p.read_text()) if doc]


def fresh_name() -> str:
    return f"vramfit-install-{secrets.token_hex(3)}"


# ---------------------------------------------------------------------------- Helm

def helm_config(namespace: str) -> helm_sdkpy.Configuration:
    # kubeconfig=None: Helm reads KUBECONFIG like the helm CLI does.
    return helm_sdkpy.Configuration(namespace=namespace)


# Under every install: no kubelet pulls the images, and values.yaml holds no digests between
# releases (the chart refuses an image without one unless images.allowTags says so).
BASE_VALUES: dict[str, Any] = {"images": {"allowTags": True}}


def helm_install(namespace: str, values: dict[str, Any] | None = None, take_ownership: bool = False) -> dict[str, Any]:
    # wait=False: the pods need not run (the cluster may have no kubelet, no images).
    return asyncio.run(helm_sdkpy.Install(helm_config(namespace)).run(
        RELEASE, str(CHART), values={**BASE_VALUES, **(values or {})}, create_namespace=True, wait=False,
        timeout=HELM_TIMEOUT_S, server_side_apply=SERVER_SIDE, take_ownership=take_ownership))


def helm_upgrade(namespace: str, values: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(helm_sdkpy.Upgrade(helm_config(namespace)).run(
        RELEASE, str(CHART), values={**BASE_VALUES, **values}, wait=False, timeout=HELM_TIMEOUT_S))


def helm_uninstall(namespace: str) -> bool:
    """Uninstall; False when there was no release."""
    try:
        asyncio.run(helm_sdkpy.Uninstall(helm_config(namespace)).run(RELEASE, wait=True, timeout=HELM_TIMEOUT_S))
    except helm_sdkpy.ReleaseNotFoundError:
        return False
    return True


def release_exists(namespace: str) -> bool:
    try:
        asyncio.run(helm_sdkpy.Status(helm_config(namespace)).run(RELEASE))
    except helm_sdkpy.ReleaseNotFoundError:
        return False
    return True


def manifest_objects(release: dict[str, Any]) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(release.get("manifest") or "") if doc]


def remove_release(namespace: str, crds_before: set[str]) -> list[str]:
    """Cleanup after a Helm check: the release, its namespace, the CRDs it caused to exist."""
    problems = []
    try:
        helm_uninstall(namespace)
    except helm_sdkpy.HelmError as e:
        problems.append(f"helm uninstall: {e}")
    problems += delete_namespace(namespace)
    problems += delete(*[f"crd/{n}" for n in sorted(existing_crds() - crds_before)])
    return problems


@contextlib.contextmanager
def installed_chart(values: dict[str, Any] | None = None) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The chart installed into a fresh namespace with `values`: (namespace, rendered
    objects); removed afterwards with the CRDs it created."""
    namespace, crds_before = fresh_name(), existing_crds()
    if crds_before:
        raise CheckFailed(f"no vramfit CRDs before the install, seen {sorted(crds_before)}: "
                          "remove the other vramfit install first")
    with cleaning_up(lambda: remove_release(namespace, crds_before)):
        try:
            release = helm_install(namespace, values)
        except helm_sdkpy.HelmError as e:
            raise CheckFailed(f"helm install into {namespace} accepted, seen: {e}") from e
        yield namespace, manifest_objects(release)


def objects_of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def service_account(objects: list[dict[str, Any]], workload_kind: str) -> str:
    """The ServiceAccount of the chart's Deployment or DaemonSet."""
    (workload,) = objects_of(objects, workload_kind)
    return workload["spec"]["template"]["spec"]["serviceAccountName"]


# ---------------------------------------------------------------------------- checks

def deploy_objects() -> list[dict[str, Any]]:
    """deploy/'s objects, after checking that none but the CRDs is on the cluster yet."""
    objects = load_manifests(*sorted(DEPLOY.glob("*.yaml")))
    present = [ref(o) for o in objects if o["kind"] != "CustomResourceDefinition" and exists(o)]
    if present:
        raise CheckFailed(f"a cluster without vramfit, seen already there: {', '.join(present)}")
    return objects


def apply_deploy(objects: list[dict[str, Any]], when: str) -> None:
    """`kubectl apply --server-side -f deploy/`: accepted, no warning, every object there."""
    r = kubectl("apply", "--server-side", "-f", str(DEPLOY), timeout=120)
    warnings = [line for line in r.err.splitlines() if "Warning" in line]
    if r.rc != 0:
        raise CheckFailed(f"{when}: apply accepted, seen exit {r.rc}: {r.err.strip()}")
    if warnings:
        raise CheckFailed(f"{when}: no warning, seen: {' | '.join(warnings)}")
    missing = missing_on_server(objects)
    if missing:
        raise CheckFailed(f"{when}: every object of deploy/ on the server, missing: {', '.join(missing)}")


def check_deploy_server_side_apply() -> None:
    objects, crds_before = deploy_objects(), existing_crds()
    with cleaning_up(lambda: remove_applied(objects, crds_before)):
        apply_deploy(objects, "kubectl apply --server-side -f deploy/")


def remove_applied(objects: list[dict[str, Any]], crds_before: set[str]) -> list[str]:
    """Namespaced objects go with their namespace; then the cluster-scoped ones, and the
    CRDs that were not there before."""
    namespaces = [o["metadata"]["name"] for o in objects_of(objects, "Namespace")]
    cluster_scoped = [ref(o) for o in objects if "namespace" not in o["metadata"]
                      and o["kind"] not in ("Namespace", "CustomResourceDefinition")]
    problems = [p for ns in namespaces for p in delete_namespace(ns)]
    problems += delete(*cluster_scoped)
    problems += delete(*[f"crd/{n}" for n in sorted(existing_crds() - crds_before)])
    return problems


# The kinds the chart must have created, by default.
INSTALLED_KINDS = ["Deployment", "DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                   "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition"]
METRICS_PEERS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                  "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
UPGRADE_VALUES = {"operator": {"replicas": 1, "logFormat": "text"},
                  "networkPolicy": {"enabled": True, "metricsFrom": METRICS_PEERS}}


def check_helm_install_upgrade_uninstall() -> None:
    with installed_chart() as (namespace, objects):
        absent = [k for k in INSTALLED_KINDS if not objects_of(objects, k)]
        if absent:
            raise CheckFailed(f"the release renders {', '.join(INSTALLED_KINDS)}; it lacks {', '.join(absent)}")
        missing = missing_on_server(objects)
        if missing:
            raise CheckFailed(f"every object of the release on the server, missing: {', '.join(missing)}")

        check_upgrade(namespace, objects)

        if not helm_uninstall(namespace):
            raise CheckFailed("helm uninstall found the release, it did not")
        crds = objects_of(objects, "CustomResourceDefinition")
        left = missing_on_server(crds)
        if left:
            raise CheckFailed(f"CRDs kept after uninstall (helm.sh/resource-policy: keep), gone: {', '.join(left)}")
        still = [ref(o) for o in objects if o["kind"] != "CustomResourceDefinition" and exists(o)]
        if still:
            raise CheckFailed(f"every other object gone after uninstall, still there: {', '.join(still)}")


def check_upgrade(namespace: str, objects: list[dict[str, Any]]) -> None:
    (deployment,) = objects_of(objects, "Deployment")
    name = deployment["metadata"]["name"]
    try:
        helm_upgrade(namespace, UPGRADE_VALUES)
    except helm_sdkpy.HelmError as e:
        raise CheckFailed(f"helm upgrade with {UPGRADE_VALUES} accepted, seen: {e}") from e
    live = get_json("deployment", name, "-n", namespace) or {}
    replicas = live.get("spec", {}).get("replicas")
    args = live.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [{}])[0].get("args", [])
    if replicas != 1 or "--log-format=text" not in args:
        raise CheckFailed(f"after upgrade, replicas 1 and --log-format=text; seen replicas {replicas}, args {args}")
    for component in ("operator", "agent"):
        policy = get_json("networkpolicy", f"{RELEASE}-{component}-metrics", "-n", namespace) or {}
        ingress = policy.get("spec", {}).get("ingress") or [{}]
        if ingress[0].get("from") != METRICS_PEERS:
            raise CheckFailed(f"after upgrade, NetworkPolicy {RELEASE}-{component}-metrics admitting "
                              f"{METRICS_PEERS}; seen {policy.get('spec') or 'none'}")


def expect_ownership_error(namespace: str, when: str, wanted: list[str]) -> None:
    """helm install must be refused with Helm's ownership error naming `wanted`, and leave
    no release behind."""
    try:
        helm_install(namespace)
    except helm_sdkpy.InstallError as e:
        message = str(e)
    else:
        raise CheckFailed(f"{when}: helm install refused (the objects are not the release's), seen: installed")
    absent = [w for w in ["invalid ownership metadata", *wanted] if w not in message]
    if absent:
        raise CheckFailed(f"{when}: an ownership error naming {absent}, seen: {message}")
    if release_exists(namespace):
        raise CheckFailed(f"{when}: no release left by the refused install, seen one")


def kubectl_to_helm(namespace: str) -> None:
    """The README's migration: mark the CRDs as the release's (what Helm checks)."""
    kubectl_ok("label", "crd", *CRD_NAMES, f"{HELM_OWNER_LABEL}=Helm", "--overwrite")
    kubectl_ok("annotate", "crd", *CRD_NAMES, f"{HELM_OWNER_ANNOTATIONS[0]}={RELEASE}",
               f"{HELM_OWNER_ANNOTATIONS[1]}={namespace}", "--overwrite")


def helm_to_kubectl() -> None:
    """The README's way back: after `helm uninstall` (CRDs kept), apply deploy/'s CRDs with
    kubectl and drop the release's marks, so that no later release adopts them silently."""
    crds = objects_of(load_manifests(*sorted(DEPLOY.glob("*.yaml"))), "CustomResourceDefinition")
    r = kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(crds), timeout=120)
    if r.rc != 0 or "Warning" in r.err:
        raise CheckFailed(f"kubectl apply --server-side of deploy/'s CRDs over the kept ones: accepted "
                          f"without warning, seen: {r.err.strip()}")
    kubectl_ok("annotate", "crd", *CRD_NAMES, *[f"{a}-" for a in HELM_OWNER_ANNOTATIONS])


def check_helm_refuses_kubectl_installed_crds() -> None:
    crds_move_between_kubectl_and_helm()
    deploy_install_moves_to_helm_and_back()


def crds_move_between_kubectl_and_helm() -> None:
    """CRDs applied from crds/ that a release is now to own: Helm refuses them, the README's
    marks make it adopt them; handed back to kubectl, --take-ownership adopts them too."""
    namespace, crds_before = fresh_name(), existing_crds()
    if crds_before:
        raise CheckFailed(f"no vramfit CRDs before the check, seen {sorted(crds_before)}")
    with cleaning_up(lambda: remove_release(namespace, crds_before)):
        kubectl_ok("apply", "--server-side", "-f", str(CRDS), timeout=120)
        expect_ownership_error(namespace, "CRDs applied with kubectl", [HELM_OWNER_LABEL, *HELM_OWNER_ANNOTATIONS])

        kubectl_to_helm(namespace)
        try:
            helm_install(namespace)
        except helm_sdkpy.HelmError as e:
            raise CheckFailed(f"after labelling/annotating the CRDs, helm install succeeds; seen: {e}") from e
        helm_uninstall(namespace)
        if existing_crds() != set(CRD_NAMES):
            raise CheckFailed(f"CRDs kept by helm uninstall, seen {sorted(existing_crds())}")

        # Back to kubectl: Helm refuses them again; --take-ownership adopts them as they are.
        helm_to_kubectl()
        expect_ownership_error(namespace, "CRDs handed back to kubectl", list(HELM_OWNER_ANNOTATIONS))
        try:
            helm_install(namespace, take_ownership=True)
        except helm_sdkpy.HelmError as e:
            raise CheckFailed(f"helm install --take-ownership succeeds; seen: {e}") from e


def deploy_install_moves_to_helm_and_back() -> None:
    """A whole `kubectl apply -f deploy/` install, moved under Helm as the README says (mark
    every object of deploy/vramfit.yaml, helm install: server-side apply must meet no field
    conflict with kubectl's), and back (helm uninstall, kubectl apply)."""
    objects, crds_before = deploy_objects(), existing_crds()
    namespace = objects_of(objects, "Namespace")[0]["metadata"]["name"]
    chart_file = str(DEPLOY / "vramfit.yaml")
    with cleaning_up(lambda: remove_release(namespace, crds_before) + remove_applied(objects, crds_before)):
        apply_deploy(objects, "deploy/ applied with kubectl")
        expect_ownership_error(namespace, "deploy/ applied with kubectl", list(HELM_OWNER_ANNOTATIONS))
        kubectl_ok("label", "-f", chart_file, f"{HELM_OWNER_LABEL}=Helm", "--overwrite")
        kubectl_ok("annotate", "-f", chart_file, f"{HELM_OWNER_ANNOTATIONS[0]}={RELEASE}",
                   f"{HELM_OWNER_ANNOTATIONS[1]}={namespace}", "--overwrite")
        try:
            helm_install(namespace)
        except helm_sdkpy.HelmError as e:
            raise CheckFailed(f"after marking deploy/'s objects, helm install adopts them; seen: {e}") from e
        helm_uninstall(namespace)
        apply_deploy(objects, "deploy/ applied again after helm uninstall")
        kubectl_ok("annotate", "crd", *CRD_NAMES, *[f"{a}-" for a in HELM_OWNER_ANNOTATIONS])


# The agent label guard: (what the agent tries, kubectl arguments after `kubectl`, the
# policy message expected on stderr or None when it must be allowed). {node} is the Node.
GUARD_CASES: list[tuple[str, list[str], str | None]] = [
    ("set a vramfit.io/ label", ["label", "node", "{node}", "vramfit.io/gpu.test=1"], None),
    ("change a vramfit.io/ label", ["label", "node", "{node}", "vramfit.io/gpu.test=2", "--overwrite"], None),
    ("remove a vramfit.io/ label", ["label", "node", "{node}", "vramfit.io/gpu.test-"], None),
    ("change another label", ["label", "node", "{node}", "team=x", "--overwrite"],
     "the vramfit agent may only change vramfit.io/ labels"),
    ("add another label", ["label", "node", "{node}", "other=y"],
     "the vramfit agent may only add vramfit.io/ labels"),
    ("add a taint", ["taint", "node", "{node}", "vramfit.io/test=x:NoSchedule"],
     "the vramfit agent may not change a Node's spec"),
    ("add an annotation", ["annotate", "node", "{node}", "vramfit.io/test=x"],
     "the vramfit agent may not change a Node's annotations"),
    ("set spec.unschedulable", ["patch", "node", "{node}", "--type=merge", "-p", '{"spec":{"unschedulable":true}}'],
     "the vramfit agent may not change a Node's spec"),
]


def check_agent_label_guard_enforced(namespace: str, objects: list[dict[str, Any]]) -> None:
    """With the agent's real ServiceAccount tokens (no impersonation: the node name is in the
    token): one bound to a Pod on Node A may change A's vramfit.io/ labels and nothing else,
    and no label of Node B; a token bound to no Pod may change no Node."""
    sa = service_account(objects, "DaemonSet")
    agent = f"system:serviceaccount:{namespace}:{sa}"
    own, other, pod = fresh_name(), fresh_name(), fresh_name()
    with cleaning_up(lambda: delete(f"node/{own}", f"node/{other}")
                     + delete(f"pod/{pod}", namespace=namespace)), \
            tempfile.TemporaryDirectory(prefix="vramfit-install-agent-") as tmp:
        for node in (own, other):
            # No GPU label: neither the agent DaemonSet nor the operator lands on it.
            kubectl_ok("create", "-f", "-", stdin=json.dumps({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, "team": "a"}}}))
        wait_until_guard_active(own, agent)
        bound_pod(namespace, pod, sa, own)
        as_own_agent = token_kubeconfig(Path(tmp) / "own", kubectl_ok(
            "create", "token", sa, "-n", namespace, "--bound-object-kind", "Pod",
            "--bound-object-name", pod, "--duration", "10m").strip())
        as_unbound_agent = token_kubeconfig(Path(tmp) / "unbound", kubectl_ok(
            "create", "token", sa, "-n", namespace, "--duration", "10m").strip())
        problems = policy_type_warnings(objects_of(objects, "ValidatingAdmissionPolicy")[0]["metadata"]["name"])
        cases = GUARD_CASES + [
            ("set a vramfit.io/ label on another agent's node",
             ["label", "node", other, "vramfit.io/gpu.test=1"],
             f"its token belongs to node {own}, it tried to change node {other}"),
        ]
        for what, args, message in cases:
            r = kubectl("--kubeconfig", as_own_agent, *[a.replace("{node}", own) for a in args])
            problems += guard_problems(what, r, message)
        r = kubectl("--kubeconfig", as_unbound_agent, "label", "node", own, "vramfit.io/gpu.test=1")
        problems += guard_problems("a token bound to no pod sets a vramfit.io/ label", r,
                                   "names no single node")
        if problems:
            raise CheckFailed("; ".join(problems))


def guard_problems(what: str, r: Run, message: str | None) -> list[str]:
    if message is None and r.rc != 0:
        return [f"{what}: allowed, seen denied: {r.err.strip()}"]
    if message is not None and r.rc == 0:
        return [f"{what}: denied, seen allowed"]
    if message is not None and message not in r.err:
        return [f"{what}: denied with {message!r}, seen: {r.err.strip()}"]
    return []


def bound_pod(namespace: str, name: str, service_account_name: str, node: str) -> None:
    """A pod of the agent's ServiceAccount bound to `node`: its tokens carry the node's name.
    The node has no kubelet, so it never runs."""
    kubectl_ok("create", "-n", namespace, "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "serviceAccountName": service_account_name,
                 "automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}}}]}}))


def token_kubeconfig(path: Path, token: str) -> str:
    """A kubeconfig for the current cluster that authenticates with `token` only (a client
    certificate beside it would authenticate first)."""
    current = json.loads(kubectl_ok("config", "view", "--raw", "--minify", "-o", "json"))
    cluster = current["clusters"][0]["cluster"]
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "agent",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "agent", "context": {"cluster": "c", "user": "agent"}}]}))
    return str(path)


def policy_type_warnings(name: str) -> list[str]:
    """The API server type-checks a policy's CEL against the Node schema (which cel-python in
    scripts/helm_check.py cannot): its status must report no warning."""
    def checked() -> bool:
        policy = get_json("validatingadmissionpolicy", name) or {}
        return policy.get("status", {}).get("observedGeneration") == policy.get("metadata", {}).get("generation")

    wait_for(f"ValidatingAdmissionPolicy {name} type-checked", checked, timeout=30)
    status = (get_json("validatingadmissionpolicy", name) or {}).get("status", {})
    warnings = (status.get("typeChecking") or {}).get("expressionWarnings") or []
    return [f"policy type checking without warning, seen: {w.get('fieldRef')}: {w.get('warning')}" for w in warnings]


def wait_until_guard_active(node: str, agent: str) -> None:
    """A new policy reaches the admission plugin after a few seconds: until then the agent's
    forbidden change goes through. Try one (a new value each time) until it is refused."""
    attempt = 0

    def refused() -> bool:
        nonlocal attempt
        attempt += 1
        return kubectl("label", "node", node, f"probe{attempt}=x", f"--as={agent}").rc != 0

    wait_for("the label guard refuses the agent's change of another label", refused, timeout=60)
    kubectl("label", "node", node, *[f"probe{i}-" for i in range(1, attempt + 1)])


# The InferenceJob pod trust policy: (what spec.pod asks for, spec.pod or None for none,
# the policy message expected for a tenant who may not create pods and for one who may;
# None: allowed). Every job is created with --dry-run=server: nothing is stored.
POD_TRUST_SECRET_VOLUME = [{"name": "creds", "secret": {"secretName": "creds"}}]
# The shared install lets anyone set these pod label and annotation keys.
POD_TRUST_VALUES = {"inferenceJobPodTrust": {"allowedLabelKeys": ["team"],
                                             "allowedAnnotationKeys": ["prometheus.io/*"]}}
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/inference"
POD_TRUST_CASES: list[tuple[str, dict[str, Any] | None, str | None, str | None]] = [
    ("nothing", None, None, None),
    ("allowed label and annotation keys, nodeSelector, native resources, a plain env var",
     {"labels": {"team": "a"}, "annotations": {"prometheus.io/scrape": "true"}, "nodeSelector": {"pool": "gpu"},
      "resources": {"limits": {"cpu": "1"}}, "env": [{"name": "MODE", "value": "fast"}]}, None, None),
    ("a label not on the list", {"labels": {"team": "a", "role": "db"}},
     "spec.pod.labels needs permission to create pods in this namespace for the label role", None),
    ("an annotation not on the list", {"annotations": {"sidecar.istio.io/inject": "false"}},
     "spec.pod.annotations needs permission to create pods in this namespace for the annotation "
     "sidecar.istio.io/inject", None),
    ("an extended resource", {"resources": {"limits": {"devices.kubevirt.io/kvm": "1"}}},
     "spec.pod.resources needs permission to create pods in this namespace for the extended resource "
     "devices.kubevirt.io/kvm", None),
    ("an unconfined AppArmor annotation", {"annotations": {APPARMOR_ANNOTATION: "unconfined"}},
     f"spec.pod.annotations may not set {APPARMOR_ANNOTATION}", f"spec.pod.annotations may not set {APPARMOR_ANNOTATION}"),
    ("null serviceAccountName and priorityClassName", {"serviceAccountName": None, "priorityClassName": None},
     None, None),
    ("serviceAccountName", {"serviceAccountName": "builder"},
     "spec.pod.serviceAccountName needs permission to create pods in this namespace", None),
    ("a secret volume", {"volumes": POD_TRUST_SECRET_VOLUME,
                         "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
     "spec.pod.volumes needs permission to create pods in this namespace", None),
    ("env valueFrom a secretKeyRef",
     {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]},
     "spec.pod.env[].valueFrom needs permission to create pods in this namespace", None),
    ("a toleration", {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]},
     "spec.pod.tolerations needs permission to create pods in this namespace", None),
    ("priorityClassName", {"priorityClassName": "high-priority"},
     "spec.pod.priorityClassName needs permission to create pods in this namespace", None),
    ("a hostPath volume", {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
     "spec.pod.volumes may not hold a hostPath volume", "spec.pod.volumes may not hold a hostPath volume"),
]
JOB_RULE = {"apiGroups": ["vramfit.io"], "resources": ["inferencejobs"], "verbs": ["create", "get", "list", "delete"]}
POD_CREATE_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
SERVICE_CREATE_RULE = {"apiGroups": [""], "resources": ["services"], "verbs": ["create"]}
# A served job's Service type (None: unset) and whether it needs `create services`: a type
# other than ClusterIP reaches the replicas from outside the cluster.
SERVICE_TYPE_CASES: list[tuple[str | None, bool]] = [
    (None, False), ("ClusterIP", False), ("NodePort", True), ("LoadBalancer", True),
]


def pod_trust_job(namespace: str, name: str, pod: dict[str, Any] | None) -> dict[str, Any]:
    """A minimal valid InferenceJob (the e2e suite's), with `pod` as spec.pod."""
    spec: dict[str, Any] = {"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "transformers",
                            "image": "ghcr.io/example/vramfit-e2e:1", "command": ["python", "serve.py"]}
    if pod is not None:
        spec["pod"] = pod
    return {"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def served_job(namespace: str, name: str, service_type: str | None) -> dict[str, Any]:
    """pod_trust_job served behind a Service of `service_type` (unset when None)."""
    job = pod_trust_job(namespace, name, None)
    serve: dict[str, Any] = {"healthPath": "/health"}
    if service_type is not None:
        serve["serviceType"] = service_type
    job["spec"]["serve"] = serve
    return job


def create_job_as(user: str, job: dict[str, Any]) -> Run:
    return kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", f"--as={user}", stdin=json.dumps(job))


def tenant_with_roles(namespace: str, account: str, rules: list[dict[str, Any]]) -> str:
    """A ServiceAccount with a Role of `rules` bound to it; its user name."""
    meta = {"name": account, "namespace": namespace}
    for obj in [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]},
    ]:
        kubectl_ok("create", "-f", "-", stdin=json.dumps(obj))
    return f"system:serviceaccount:{namespace}:{account}"


def check_inferencejob_pod_trust_enforced(_release_namespace: str, objects: list[dict[str, Any]]) -> None:
    policies = [o["metadata"]["name"] for o in objects_of(objects, "ValidatingAdmissionPolicy")
                if o["metadata"]["name"].endswith("-inferencejob-pod-trust")]
    if len(policies) != 1:
        raise CheckFailed(f"the release renders one ValidatingAdmissionPolicy *-inferencejob-pod-trust, seen {policies}")
    policy = policies[0]
    namespace = fresh_name()
    with cleaning_up(lambda: delete_namespace(namespace)):
        kubectl_ok("create", "namespace", namespace)
        tenant = tenant_with_roles(namespace, "tenant", [JOB_RULE])
        admin = tenant_with_roles(namespace, "tenant-admin", [JOB_RULE, POD_CREATE_RULE])
        wait_until_pod_trust_active(namespace, tenant, admin)
        problems = policy_type_warnings(policy)
        for i, (what, pod, tenant_denial, admin_denial) in enumerate(POD_TRUST_CASES):
            for user, denial in ((tenant, tenant_denial), (admin, admin_denial)):
                who = user.rpartition(":")[2]
                r = create_job_as(user, pod_trust_job(namespace, f"job-{i}", pod))
                if denial is None and r.rc != 0:
                    problems.append(f"{who}, spec.pod with {what}: allowed, seen denied: {r.err.strip()}")
                elif denial is not None and r.rc == 0:
                    problems.append(f"{who}, spec.pod with {what}: denied, seen allowed")
                elif denial is not None and denial not in r.err:
                    problems.append(f"{who}, spec.pod with {what}: denied with {denial!r}, seen: {r.err.strip()}")
        # spec.serve.serviceType: pod rights do not give an exposed Service, `create services` does.
        exposer = tenant_with_roles(namespace, "tenant-exposer", [JOB_RULE, SERVICE_CREATE_RULE])
        wait_for("tenant-exposer may create services",
                 lambda: kubectl("auth", "can-i", "create", "services", "-n", namespace,
                                 f"--as={exposer}").out.strip() == "yes", timeout=60)
        for i, (service_type, exposes) in enumerate(SERVICE_TYPE_CASES):
            denial = (f"spec.serve.serviceType {service_type} needs permission to create services in this "
                      "namespace" if exposes else None)
            for user, denied in ((tenant, denial), (admin, denial), (exposer, None)):
                who = user.rpartition(":")[2]
                what = f"serviceType {service_type or 'unset'}"
                r = create_job_as(user, served_job(namespace, f"served-{i}", service_type))
                if denied is None and r.rc != 0:
                    problems.append(f"{who}, {what}: allowed, seen denied: {r.err.strip()}")
                elif denied is not None and r.rc == 0:
                    problems.append(f"{who}, {what}: denied, seen allowed")
                elif denied is not None and denied not in r.err:
                    problems.append(f"{who}, {what}: denied with {denied!r}, seen: {r.err.strip()}")
        if problems:
            raise CheckFailed("; ".join(problems))


def wait_until_pod_trust_active(namespace: str, tenant: str, admin: str) -> None:
    """RBAC and a new policy both reach the API server's caches after a moment: wait until
    both identities may create a plain job, the admin may create pods, and the tenant's
    job with a serviceAccountName is refused by the policy."""
    plain = pod_trust_job(namespace, "probe", None)
    wait_for("the tenants may create a plain InferenceJob",
             lambda: all(create_job_as(u, plain).rc == 0 for u in (tenant, admin)), timeout=60)
    wait_for("tenant-admin may create pods",
             lambda: kubectl("auth", "can-i", "create", "pods", "-n", namespace, f"--as={admin}").out.strip() == "yes",
             timeout=60)
    with_sa = pod_trust_job(namespace, "probe", {"serviceAccountName": "builder"})
    wait_for("the pod trust policy refuses the tenant's serviceAccountName",
             lambda: "spec.pod.serviceAccountName" in create_job_as(tenant, with_sa).err, timeout=60)


def check_aggregated_roles_extend_builtin(_release_namespace: str, objects: list[dict[str, Any]]) -> None:
    """The chart's <fullname>-edit and -view reach Kubernetes' built-in edit/admin and view
    roles (the controller manager aggregates them): a ServiceAccount bound to `edit` in a
    namespace may create, update and delete InferenceJobs there, one bound to `view` may
    list them but not create them, and `view` reads GpuNodeClasses."""
    names = {o["metadata"]["name"] for o in objects_of(objects, "ClusterRole")}
    absent = [n for n in (f"{RELEASE}-edit", f"{RELEASE}-view") if n not in names]
    if absent:
        raise CheckFailed(f"the release renders the ClusterRoles {RELEASE}-edit and {RELEASE}-view, it lacks {absent}")
    namespace = fresh_name()
    with cleaning_up(lambda: delete_namespace(namespace)):
        kubectl_ok("create", "namespace", namespace)
        users = {}
        for account, role in (("editor", "edit"), ("viewer", "view")):
            kubectl_ok("create", "serviceaccount", account, "-n", namespace)
            kubectl_ok("create", "rolebinding", account, f"--clusterrole={role}",
                       f"--serviceaccount={namespace}:{account}", "-n", namespace)
            users[account] = f"system:serviceaccount:{namespace}:{account}"
        expected = [("editor", verb, "yes") for verb in ("create", "update", "patch", "delete", "list")]
        expected += [("viewer", "list", "yes"), ("viewer", "watch", "yes"), ("viewer", "create", "no")]

        def answers() -> list[str]:
            return [kubectl("auth", "can-i", verb, "inferencejobs.vramfit.io", "-n", namespace,
                            f"--as={users[who]}").out.strip() for who, verb, _ in expected]

        try:
            wait_for("the built-in roles include the chart's", lambda: answers() == [a for *_, a in expected],
                     timeout=60)
        except CheckFailed as e:
            seen = ", ".join(f"{who} {verb}: {got}" for (who, verb, _), got in zip(expected, answers()))
            raise CheckFailed(f"{e}; expected {expected}, seen {seen}") from e
        view_rules = (get_json("clusterrole", "view") or {}).get("rules") or []
        if not any("vramfit.io" in r.get("apiGroups", []) and "gpunodeclasses" in r.get("resources", [])
                   for r in view_rules):
            raise CheckFailed("the built-in view ClusterRole aggregates get/list/watch on gpunodeclasses, it does not")


# ---------------------------------------------------------------------------- on a real node

# The images the chart runs on a real node, built and loaded as docker/README.md shows.
OPERATOR_IMAGE = os.environ.get("VRAMFIT_OPERATOR_IMAGE", "localhost/vramfit-operator:dev")
AGENT_IMAGE = os.environ.get("VRAMFIT_AGENT_IMAGE", "localhost/vramfit-agent:dev")
# The README's release namespace: `helm install vramfit charts/vramfit -n vramfit --create-namespace`.
README_NAMESPACE = "vramfit"
FIXTURE_CONFIGMAP = "vramfit-gpu-fixture"
FIXTURE_DIR = "/etc/vramfit/fixture"
FIXTURE_GPU = ("NVIDIA L40S", 46068, "8.9")
POD_READY_S = 120  # a pod of a local image to start and pass its probes
NO_CRASH_LOOP_S = 30  # the agent without GPUs must keep running this long
LEASE_FRESH_S = 60  # a kubelet renews its node Lease every 10 s


class Skipped(Exception):
    """The check cannot run on this cluster; the message says what is missing."""


def split_image(image: str) -> tuple[str, str]:
    """`repository:tag` as the chart's image values take it."""
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        return image, "latest"
    return repository, tag


def seconds_since(timestamp: str) -> float:
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return (datetime.now(timezone.utc) - then).total_seconds()


def node_unsuitable(node: dict[str, Any], images: list[str]) -> str | None:
    """Why the chart cannot be tried on `node` with a real kubelet, or None: a kubelet reports
    it and renews its Lease, it is Ready, it carries GPU Feature Discovery's
    nvidia.com/gpu.present=true (the agent's default affinity), advertises nvidia.com/gpu
    and holds both images."""
    status, name = node.get("status", {}), node["metadata"]["name"]
    if not status.get("nodeInfo", {}).get("kubeletVersion"):
        return "no kubelet reports it"
    lease = get_json("lease", name, "-n", "kube-node-lease") or {}
    renewed = lease.get("spec", {}).get("renewTime")
    if not renewed or seconds_since(renewed) > LEASE_FRESH_S:
        return f"its kubelet renewed no Lease within {LEASE_FRESH_S} s"
    if not any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])):
        return "not Ready"
    pressure = [c["type"] for c in status.get("conditions", []) if c["type"].endswith("Pressure")
                and c["status"] == "True"]
    if pressure:
        return f"under {', '.join(pressure)} (the kubelet evicts pods)"
    if node.get("spec", {}).get("unschedulable"):
        return "cordoned"
    if node["metadata"].get("labels", {}).get("nvidia.com/gpu.present") != "true":
        return "no label nvidia.com/gpu.present=true (which GPU Feature Discovery sets)"
    if int(status.get("allocatable", {}).get("nvidia.com/gpu", "0")) < 1:
        return "no nvidia.com/gpu in its allocatable resources"
    held = {n for i in status.get("images") or [] for n in i.get("names") or []}
    absent = [i for i in images if i not in held]
    if absent:
        return f"images not on it: {', '.join(absent)} (docker/README.md builds and loads them)"
    return None


def real_gpu_node() -> dict[str, Any]:
    """The first node that can run the chart's pods (see node_unsuitable), or Skipped."""
    nodes = (get_json("nodes") or {}).get("items", [])
    reasons = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        why = node_unsuitable(node, [OPERATOR_IMAGE, AGENT_IMAGE])
        if why is None:
            return node
        if "vramfit.io/e2e-run" not in node["metadata"].get("labels", {}):
            reasons.append(f"{node['metadata']['name']}: {why}")
    raise Skipped(f"no schedulable real GPU node ({'; '.join(reasons) or 'no nodes'})")


def gpu_fixture(count: int) -> str:
    """An agent fixture (what NVML would report) of `count` GPUs."""
    product, memory, capability = FIXTURE_GPU
    return yaml.safe_dump({"driverVersion": "550.54.15", "cudaDriverVersion": 12040, "gpus": [
        {"name": product, "memoryMiB": memory, "computeCapability": capability,
         "migMode": "unsupported", "count": count}]})


def real_node_values(fixture: bool, **operator: Any) -> dict[str, Any]:
    """The image override (and, where the node has no NVIDIA container runtime, no
    RuntimeClass); with `fixture`, the agent reads its GPUs from the ConfigMap."""
    (op_repo, op_tag), (agent_repo, agent_tag) = split_image(OPERATOR_IMAGE), split_image(AGENT_IMAGE)
    agent: dict[str, Any] = {"image": {"repository": agent_repo, "tag": agent_tag}, "runtimeClassName": ""}
    if fixture:
        agent |= {"extraArgs": [f"--fixture={FIXTURE_DIR}/gpus.yaml"],
                  "extraVolumes": [{"name": "gpu-fixture", "configMap": {"name": FIXTURE_CONFIGMAP}}],
                  "extraVolumeMounts": [{"name": "gpu-fixture", "mountPath": FIXTURE_DIR, "readOnly": True}]}
    return {"operator": {"image": {"repository": op_repo, "tag": op_tag}, **operator}, "agent": agent}


def pods(namespace: str, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/component={component}"
    return (get_json("pods", "-n", namespace, "-l", selector) or {}).get("items", [])


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses", []))


def pod_summary(namespace: str, component: str) -> str:
    return ", ".join(
        f"{p['metadata']['name']} {p['status'].get('phase')} ready={is_ready(p)} restarts={restarts(p)}"
        for p in pods(namespace, component)) or "none"


def wait_leader(namespace: str, replicas: int, not_named: set[str]) -> str:
    """Waits until the Deployment runs `replicas` pods, none of `not_named` (a rollout
    replaced them), exactly one Ready (the leader: only the Lease holder is Ready), the
    Lease held by that pod; returns its name."""
    def settled() -> bool:
        now = [p for p in pods(namespace, "operator") if "deletionTimestamp" not in p["metadata"]]
        names = {p["metadata"]["name"] for p in now}
        ready = [p["metadata"]["name"] for p in now if is_ready(p)]
        lease = get_json("lease", "vramfit-operator", "-n", namespace) or {}
        holder = lease.get("spec", {}).get("holderIdentity")
        running = all(p["status"].get("phase") == "Running" for p in now)
        return (len(now) == replicas and not names & not_named and running and ready == [holder])
    try:
        wait_for("the operator pods Running, one Ready holding the Lease", settled, timeout=POD_READY_S)
    except CheckFailed as e:
        raise CheckFailed(f"{e}; seen {pod_summary(namespace, 'operator')}") from e
    lease = get_json("lease", "vramfit-operator", "-n", namespace) or {}
    return lease["spec"]["holderIdentity"]


def wait_agent(namespace: str, node: str, labels: dict[str, str], not_named: set[str]) -> dict[str, Any]:
    """Waits until an agent pod (none of `not_named`) is Ready on `node` and the node
    carries `labels`; returns the pod."""
    def settled() -> bool:
        on_node = [p for p in pods(namespace, "agent") if p["spec"].get("nodeName") == node
                   and "deletionTimestamp" not in p["metadata"] and p["metadata"]["name"] not in not_named]
        have = (get_json("node", node) or {}).get("metadata", {}).get("labels", {})
        return len(on_node) == 1 and is_ready(on_node[0]) and all(have.get(k) == v for k, v in labels.items())
    try:
        wait_for(f"an agent pod Ready on {node}, the node labelled {labels}", settled, timeout=POD_READY_S)
    except CheckFailed as e:
        have = (get_json("node", node) or {}).get("metadata", {}).get("labels", {})
        seen = {k: v for k, v in have.items() if k.startswith("vramfit.io/")}
        raise CheckFailed(f"{e}; seen pods {pod_summary(namespace, 'agent')}, labels {seen}") from e
    (pod,) = [p for p in pods(namespace, "agent") if p["spec"].get("nodeName") == node
              and p["metadata"]["name"] not in not_named and "deletionTimestamp" not in p["metadata"]]
    return pod


def remove_gpu_labels(node: str) -> list[str]:
    labels = (get_json("node", node) or {}).get("metadata", {}).get("labels", {})
    gone = [f"{k}-" for k in labels if k.startswith(("vramfit.io/gpu.", "vramfit.io/mig-"))]
    r = kubectl("label", "node", node, *gone) if gone else Run(0, "", "")
    return [f"removing the agent's labels from {node}: {r.err.strip()}"] if r.rc else []


def check_helm_on_a_real_node() -> None:
    """The README's install on a node whose kubelet runs the pods: the operator pods pass
    their real probes, one holds the Lease; the agent labels the node from a GPU fixture
    (count = the node's nvidia.com/gpu); `helm upgrade` rolls both, and without the fixture
    the agent labels gpu.present=false and keeps running; `helm uninstall` removes them."""
    node = real_gpu_node()
    name, gpus = node["metadata"]["name"], int(node["status"]["allocatable"]["nvidia.com/gpu"])
    namespace, crds_before = README_NAMESPACE, existing_crds()
    if crds_before or get_json("namespace", namespace):
        raise CheckFailed(f"a cluster without vramfit, seen CRDs {sorted(crds_before)} or namespace {namespace}")
    with cleaning_up(lambda: remove_release(namespace, crds_before) + remove_gpu_labels(name)):
        kubectl_ok("create", "namespace", namespace)
        kubectl_ok("create", "configmap", FIXTURE_CONFIGMAP, "-n", namespace,
                   f"--from-literal=gpus.yaml={gpu_fixture(gpus)}")
        start = time.monotonic()
        try:
            helm_install(namespace, real_node_values(fixture=True))
        except helm_sdkpy.HelmError as e:
            raise CheckFailed(f"helm install with the local images accepted, seen: {e}") from e
        leader = wait_leader(namespace, 2, set())
        first_operators = {p["metadata"]["name"] for p in pods(namespace, "operator")}
        agent = wait_agent(namespace, name, {"vramfit.io/gpu.present": "true", "vramfit.io/gpu.count": str(gpus),
                                             "vramfit.io/gpu.product": "NVIDIA-L40S"}, set())
        print(f"     install: {time.monotonic() - start:.0f} s to the leader {leader} and the agent "
              f"{agent['metadata']['name']} labelling {name} with {gpus} GPU(s)", flush=True)

        start = time.monotonic()
        try:
            helm_upgrade(namespace, real_node_values(fixture=False, logFormat="text"))
        except helm_sdkpy.HelmError as e:
            raise CheckFailed(f"helm upgrade accepted, seen: {e}") from e
        leader = wait_leader(namespace, 2, first_operators)
        agent = wait_agent(namespace, name, {"vramfit.io/gpu.present": "false",
                                             "vramfit.io/gpu.absent-reason": "nvml-unavailable"},
                           {agent["metadata"]["name"]})
        time.sleep(NO_CRASH_LOOP_S)
        agent = get_json("pod", agent["metadata"]["name"], "-n", namespace) or {}
        if not is_ready(agent) or restarts(agent):
            raise CheckFailed(f"the agent without GPUs Ready with no restart for {NO_CRASH_LOOP_S} s, "
                              f"seen {pod_summary(namespace, 'agent')}")
        print(f"     upgrade: {time.monotonic() - start:.0f} s to the new leader {leader} and the agent "
              f"{agent['metadata']['name']} labelling {name} gpu.present=false", flush=True)

        if not helm_uninstall(namespace):
            raise CheckFailed("helm uninstall found the release, it did not")
        wait_for("the release's pods gone", lambda: not pods(namespace, "operator") and not pods(namespace, "agent"))


# ---------------------------------------------------------------------------- main

class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def run(self, name: str, check: Callable[[], None]) -> None:
        """Run one check; any exception is its failure, never the end of the run."""
        try:
            check()
        except Skipped as e:
            self.skipped += 1
            print(f"SKIP {name}: {e}", flush=True)
        except CheckFailed as e:
            self.fail(name, str(e))
        except Exception as e:  # noqa: BLE001 - a crash in one check must not stop the others
            self.fail(name, f"{type(e).__name__}: {e}")
        else:
            self.passed += 1
            print(f"PASS {name}", flush=True)

    def fail(self, name: str, why: str) -> None:
        self.failed += 1
        print(f"FAIL {name}: {' '.join(why.split())}", flush=True)


def run_with_installed_chart(report: Report, checks: dict[str, Callable[[str, list[dict[str, Any]]], None]]) -> None:
    """Checks that need an install share one (installed and removed once). If the install
    fails, each of them fails; if only its removal fails, that is one more failure."""
    ran = False
    try:
        with installed_chart(POD_TRUST_VALUES) as (namespace, objects):
            ran = True
            for name, check in checks.items():
                report.run(name, lambda c=check: c(namespace, objects))
    except Exception as e:  # noqa: BLE001 - reported, never the end of the run
        for name in checks if not ran else ["shared-install-cleanup"]:
            report.fail(name, f"{type(e).__name__}: {e}")


def main() -> int:
    if not os.environ.get("KUBECONFIG"):
        print("install-check: KUBECONFIG is not set: it needs a cluster (kind, k3d, any cluster)", file=sys.stderr)
        return 2
    print(f"install-check: {helm_sdkpy.get_version()} (helm-sdkpy {helm_sdkpy.__version__}), "
          f"kubectl {KUBECTL}", flush=True)
    report = Report()
    report.run("deploy-server-side-apply", check_deploy_server_side_apply)
    report.run("helm-install-upgrade-uninstall", check_helm_install_upgrade_uninstall)
    report.run("helm-refuses-kubectl-installed-crds", check_helm_refuses_kubectl_installed_crds)
    run_with_installed_chart(report, {
        "agent-label-guard-enforced": check_agent_label_guard_enforced,
        "inferencejob-pod-trust-enforced": check_inferencejob_pod_trust_enforced,
        "aggregated-roles-extend-builtin": check_aggregated_roles_extend_builtin,
    })
    report.run("helm-install-on-a-real-node", check_helm_on_a_real_node)
    print(f"install-check: {report.passed} passed, {report.failed} failed, {report.skipped} skipped")
    return 1 if report.failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        shutil.rmtree(_HELM_HOME, ignore_errors=True)
