#!/usr/bin/env python3
"""Lint and render charts/vramfit with Helm's own engine, with no helm binary and no cluster.

Run through scripts/helm-check.sh, which sets up the virtual environment.

helm-sdkpy bundles Helm v4's Go library. It exposes lint, but no `helm template`; it
does expose install, whose result carries the rendered manifest. So rendering installs
the chart with Helm's in-memory release storage (HELM_DRIVER=memory) into a fake API
server on 127.0.0.1 that answers discovery and accepts every object without keeping it:
the manifest is exactly what `helm template` / `helm install` produce.

Checks, each reported as one line; the last line is "helm-check: N passed, N failed":
  * the chart's CRD copy (charts/vramfit/crds-src/) equals crds/*.yaml;
  * lint with the default values, and with ci/all-enabled-values.yaml (every optional
    part on): no finding of error severity;
  * lint and render with ci/watch-namespaces-values.yaml too (the namespace-scoped
    install: operator.watchNamespaces [team-a, team-b]), and with ci/model-cache-values.yaml
    (the node model cache on), whose render install-tests/rendered/model-cache.yaml keeps;
  * the cache agent status guard's CEL: the cache agent's token may update the status of
    the ModelCache named after its node (the node-name user extra) and nothing else: no
    other node's, no spec, labels or finalizers, no create, delete or update of the object;
  * the model-cache volume guard's CEL: the operator's token may create only a ReadOnlyMany
    hostPath volume (type Directory) exactly two levels under <root>/served/, claimed by a
    vramfit-model-… claim and labelled as a model volume, and delete only model volumes;
    the model-cache pod guard's CEL: a pod that mounts a model claim must set
    persistentVolumeClaim.readOnly, and no ephemeral volume may name a model volume;
  * render with each; every object valid against the Kubernetes 1.30 OpenAPI schema in
    strict mode (no unknown field: the chart's supported floor is 1.30);
  * deploy/ equals the default render (--update rewrites it); install-tests/rendered/
    watch-namespaces.yaml equals the namespace-scoped render (--update rewrites it: only
    the default render belongs in deploy/);
  * the namespace-scoped render differs from the default one only in the operator's RBAC
    (its ClusterRole's rules; a Role and RoleBinding in each watched namespace) and the
    Deployment's --watch-namespaces: the admission policies, the aggregated roles and the
    rest are the same;
  * the agent label guard's CEL accepts the agent's vramfit.io/ label changes on the
    Node its token names (the authentication.kubernetes.io/node-name user extra) and
    rejects everything else: other Nodes, tokens without a node name, other fields
    (evaluated with cel-python: the logic, not the API server's type checking or cost
    limits);
  * the InferenceJob pod trust policy's CEL: spec.pod's serviceAccountName, volumes,
    env[].valueFrom, tolerations, priorityClassName, labels, annotations and extended
    resources are denied, each with its own message, to a user who may not create pods
    and allowed to one who may; label and annotation keys on the install's allowed*Keys
    lists pass for both; hostPath is denied to both; a served job's serviceType NodePort
    or LoadBalancer is denied to a user who may not create services (pod rights do not
    count) and allowed to one who may; a metadata-only update passes
    (cel-python has no `authorizer`: a fake one answers from a table; the real API
    server's answer is e2e/install_check.py's inferencejob-pod-trust-enforced);
  * operator.hub.tokenSecret: no Secret is granted by default; with it (all-enabled), one
    Role in the release namespace grants `get` on that Secret by name, bound to the
    operator's ServiceAccount, and the Deployment passes --hub-token-secret and the token's
    namespaces and repositories (--hub-token-namespaces, --hub-token-repos);
  * the metrics NetworkPolicies: none by default; on, one per component that selects its
    pods and admits its metrics port from networkPolicy.metricsFrom only (no rule for an
    empty list: a rule without `from` admits everyone);
  * images by digest: scripts/pin_images.py's edit of values.yaml renders every image as
    repository@digest; without a digest the chart refuses unless images.allowTags. Every
    render here adds images.allowTags while values.yaml has no digests (between
    releases), and so does deploy/; pin_images.py --cache-agent pins the cache agent's
    image (modelCache.agent.image) the same way;
  * wrong values fail: values.schema.json (a string replica count, an unknown key, a
    malformed digest or label key) and the chart's own cross-field checks (the agent
    without a label guard that denies, unless agentLabelGuard.acceptUnguardedAgent says
    so; InferenceJobs without a pod trust policy that denies, unless
    inferenceJobPodTrust.acceptUnguardedJobs says so; an image without a digest).
"""

from __future__ import annotations

import os
import sys
import tempfile

# Helm's Go runtime reads its environment once, when the library is loaded: set it first.
_HELM_HOME = tempfile.mkdtemp(prefix="vramfit-helm-")
os.environ["HELM_DRIVER"] = "memory"
for _var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
    os.environ[_var] = os.path.join(_HELM_HOME, _var.lower())
os.environ.pop("KUBECONFIG", None)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import copy  # noqa: E402
import difflib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import threading  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import celpy  # noqa: E402
import helm_sdkpy  # noqa: E402
import kubernetes_validate  # noqa: E402
import yaml  # noqa: E402

import pin_images  # noqa: E402 - scripts/pin_images.py, the release's digest step

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "vramfit"
ALL_ENABLED_VALUES = CHART / "ci" / "all-enabled-values.yaml"
WATCH_NAMESPACES_VALUES = CHART / "ci" / "watch-namespaces-values.yaml"
# The namespace-scoped render, for install-tests and the e2e suite (not an install path).
WATCH_NAMESPACES_RENDER = ROOT / "install-tests" / "rendered" / "watch-namespaces.yaml"
# The install with the node model cache on, for install-tests (the cache agent's RBAC).
MODEL_CACHE_VALUES = CHART / "ci" / "model-cache-values.yaml"
MODEL_CACHE_RENDER = ROOT / "install-tests" / "rendered" / "model-cache.yaml"
DEPLOY = ROOT / "deploy"
CRDS = ROOT / "crds"
CHART_CRDS = CHART / "crds-src"
RELEASE = "vramfit"
NAMESPACE = "vramfit"
# The chart's images, each at <component>.image.
IMAGE_COMPONENTS = ("operator", "agent")
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion): the fake API server
# reports it, and every rendered object is validated against its schema.
KUBE_FLOOR = "1.30.0"
# Kinds that come from CRDs of other projects: no schema in kubernetes-validate.
FOREIGN_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}

# Helm's lint severities (helm.sh/helm/v4/pkg/chart/v2/lint/support).
SEVERITY = {0: "unknown", 1: "info", 2: "warning", 3: "error"}
ERROR_SEVERITY = 3

GENERATED_HEADER = (
    "# Generated by `scripts/helm-check.sh --update` from charts/vramfit with its default\n"
    f"# values (release {RELEASE}, namespace {NAMESPACE}). Do not edit: change the chart.\n"
    "# Install: kubectl apply --server-side -f deploy/\n"
)
UNPINNED_NOTE = (
    "# Images by tag (images.allowTags): values.yaml holds no digests between releases;\n"
    "# a release pins them (scripts/pin-images.sh) and re-renders this file.\n"
)
WATCH_NAMESPACES_HEADER = (
    "# Generated by `scripts/helm-check.sh --update` from charts/vramfit with\n"
    f"# ci/watch-namespaces-values.yaml (release {RELEASE}, namespace {NAMESPACE}): the install\n"
    "# whose operator reconciles InferenceJobs in team-a and team-b only. Read by\n"
    "# install-tests/tests/rbac.rs and the e2e scenario namespace-scoped-install. Do not edit.\n"
)
MODEL_CACHE_HEADER = (
    "# Generated by `scripts/helm-check.sh --update` from charts/vramfit with\n"
    f"# ci/model-cache-values.yaml (release {RELEASE}, namespace {NAMESPACE}): the install with\n"
    "# the node model cache on. Read by install-tests/tests/rbac.rs. Do not edit.\n"
)
NAMESPACE_MANIFEST = GENERATED_HEADER + f"""apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    app.kubernetes.io/part-of: vramfit
    # Every vramfit pod meets the "restricted" Pod Security Standard.
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
"""

# The API the fake server advertises: group -> version -> [(plural, kind, namespaced)].
API_RESOURCES: dict[str, dict[str, list[tuple[str, str, bool]]]] = {
    "": {"v1": [
        ("namespaces", "Namespace", False),
        ("serviceaccounts", "ServiceAccount", True),
        ("services", "Service", True),
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("pods", "Pod", True),
    ]},
    "apps": {"v1": [("deployments", "Deployment", True), ("daemonsets", "DaemonSet", True)]},
    "rbac.authorization.k8s.io": {"v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ]},
    "policy": {"v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)]},
    "networking.k8s.io": {"v1": [("networkpolicies", "NetworkPolicy", True)]},
    "coordination.k8s.io": {"v1": [("leases", "Lease", True)]},
    "apiextensions.k8s.io": {"v1": [("customresourcedefinitions", "CustomResourceDefinition", False)]},
    "admissionregistration.k8s.io": {"v1": [
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False),
    ]},
    "monitoring.coreos.com": {"v1": [("servicemonitors", "ServiceMonitor", True)]},
}


class FakeApiServer:
    """Just enough of a Kubernetes API server for `helm install`: discovery, 404 on every
    GET of an object (nothing exists yet), and 201 echoing every create."""

    def __init__(self, kube_version: str):
        major, minor, _ = kube_version.split(".")
        version = {"major": major, "minor": minor, "gitVersion": f"v{kube_version}", "platform": "linux/amd64"}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def reply(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def not_found(self) -> None:
                self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404, "message": "not found"})

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?")[0]
                if path == "/version":
                    return self.reply(200, version)
                if path == "/api":
                    return self.reply(200, {"kind": "APIVersions", "versions": ["v1"]})
                if path == "/apis":
                    groups = [{
                        "name": group,
                        "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                        "preferredVersion": {"groupVersion": f"{group}/{next(iter(versions))}",
                                             "version": next(iter(versions))},
                    } for group, versions in API_RESOURCES.items() if group]
                    return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
                m = re.fullmatch(r"/api/(v1)|/apis/([^/]+)/([^/]+)", path)
                if m:
                    group, ver = m.group(2) or "", m.group(1) or m.group(3)
                    resources = API_RESOURCES.get(group, {}).get(ver)
                    if resources is None:
                        return self.not_found()
                    return self.reply(200, {
                        "kind": "APIResourceList", "apiVersion": "v1",
                        "groupVersion": f"{group}/{ver}" if group else ver,
                        "resources": [{
                            "name": plural, "singularName": kind.lower(), "namespaced": namespaced,
                            "kind": kind, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                        } for plural, kind, namespaced in resources],
                    })
                return self.not_found()

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                try:
                    obj = json.loads(body)
                except ValueError:
                    obj = {}
                self.reply(201, obj)

            do_PUT = do_POST
            do_PATCH = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self) -> str:
        port = self.server.server_address[1]
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": NAMESPACE}}],
        })


def images_pinned(values: dict[str, Any]) -> bool:
    """Whether `values` pin every image by digest, as a release's values.yaml does."""
    return all(values[c]["image"].get("digest") for c in IMAGE_COMPONENTS)


# What every render adds to the chart's values.yaml: nothing when it pins every image by
# digest (a release's), else images.allowTags (between releases its digests are empty, and
# the chart refuses to render an image without one); deploy/ is rendered the same way.
DEFAULTS_PINNED = images_pinned(yaml.safe_load((CHART / "values.yaml").read_text()))
BASE_VALUES: dict[str, Any] = {} if DEFAULTS_PINNED else {"images": {"allowTags": True}}


async def render_release(values: dict[str, Any] | None) -> dict[str, Any]:
    """The release `helm install vramfit charts/vramfit -n vramfit` makes, with `values`
    over BASE_VALUES over the chart's defaults: "manifest" and "info.notes". Raises
    helm_sdkpy.HelmError with Helm's message."""
    merged = deep_merge(BASE_VALUES, values or {})
    with FakeApiServer(KUBE_FLOOR) as server:
        config = helm_sdkpy.Configuration(namespace=NAMESPACE, kubeconfig=server.kubeconfig())
        return await helm_sdkpy.Install(config).run(
            RELEASE, str(CHART), values=merged or None, wait=False, timeout=60)


async def render(values: dict[str, Any] | None) -> str:
    return (await render_release(values))["manifest"]


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


async def lint(values: dict[str, Any] | None) -> list[tuple[int, str]]:
    """Helm lint findings as (severity, path). helm-sdkpy's lint takes no values, so the
    chart is copied with `values` merged into its values.yaml. (Its findings carry no
    message text; render() gives Helm's message for the same error.)"""
    with tempfile.TemporaryDirectory(prefix="vramfit-lint-") as tmp:
        chart = Path(tmp) / "vramfit"
        shutil.copytree(CHART, chart)
        merged = deep_merge(BASE_VALUES, values or {})
        if merged:
            defaults = yaml.safe_load((CHART / "values.yaml").read_text()) or {}
            (chart / "values.yaml").write_text(yaml.safe_dump(deep_merge(defaults, merged), sort_keys=False))
        result = await helm_sdkpy.Lint(helm_sdkpy.Configuration(namespace=NAMESPACE)).run(str(chart))
    if result.get("TotalChartsLinted") != 1:
        raise RuntimeError(f"helm lint linted {result.get('TotalChartsLinted')} charts, expected 1")
    return [(int(m.get("Severity", 0)), str(m.get("Path", ""))) for m in result.get("Messages") or []]


def split_manifest(manifest: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def k8s_schema_errors(objects: list[dict[str, Any]]) -> list[str]:
    """Objects not valid, in strict mode, against the Kubernetes KUBE_FLOOR schema."""
    errors = []
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        if (obj.get("apiVersion"), obj.get("kind")) in FOREIGN_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_FLOOR, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = "/".join(str(p) for p in e.path) or "(root)"
            errors.append(f"{name}: {where}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{name}: {obj.get('apiVersion')} {obj.get('kind')} does not exist in Kubernetes {KUBE_FLOOR}")
    return errors


# The user extra in which Kubernetes 1.30+ puts the node of the pod a token is bound to.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def label_guard_cases() -> tuple[list[tuple[str, str, dict[str, Any] | None, bool, Any]], dict[str, Any]]:
    """(case, operation, new Node or None, allowed?, the token's user extra) against the
    Node below; the token of every case but the last few is the agent pod's on that Node."""
    node = {
        "metadata": {
            "name": "gpu-1",
            "labels": {"kubernetes.io/hostname": "gpu-1", "nvidia.com/gpu.present": "true",
                       "vramfit.io/gpu.count": "1"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.0.0.0/24",
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    }

    def changed(change: Any) -> dict[str, Any]:
        new = copy.deepcopy(node)
        change(new)
        return new

    labels = lambda n: n["metadata"]["labels"]  # noqa: E731
    bf16 = changed(lambda n: labels(n).update({"vramfit.io/gpu.bf16": "true"}))
    own = {NODE_NAME_EXTRA: ["gpu-1"]}
    cases = [
        ("sets a vramfit.io/ label", "UPDATE", changed(lambda n: labels(n).update({"vramfit.io/gpu.count": "2"})), True),
        ("adds a vramfit.io/ label", "UPDATE", changed(lambda n: labels(n).update({"vramfit.io/gpu.product": "NVIDIA-L4"})), True),
        ("removes a vramfit.io/ label", "UPDATE", changed(lambda n: labels(n).pop("vramfit.io/gpu.count")), True),
        ("changes nothing", "UPDATE", changed(lambda n: None), True),
        ("changes another label", "UPDATE", changed(lambda n: labels(n).update({"nvidia.com/gpu.present": "false"})), False),
        ("adds another label", "UPDATE", changed(lambda n: labels(n).update({"node-role.kubernetes.io/gpu": ""})), False),
        ("removes another label", "UPDATE", changed(lambda n: labels(n).pop("kubernetes.io/hostname")), False),
        ("changes an annotation", "UPDATE", changed(lambda n: n["metadata"]["annotations"].update({"x": "y"})), False),
        ("removes the annotations", "UPDATE", changed(lambda n: n["metadata"].pop("annotations")), False),
        ("removes a taint", "UPDATE", changed(lambda n: n["spec"].update({"taints": []})), False),
        ("cordons the node", "UPDATE", changed(lambda n: n["spec"].update({"unschedulable": True})), False),
        ("adds a finalizer", "UPDATE", changed(lambda n: n["metadata"].update({"finalizers": ["x"]})), False),
        ("creates a Node", "CREATE", changed(lambda n: None), False),
    ]
    return [(*case, own) for case in cases] + [
        # Another agent pod's token: its own Node only, even for vramfit.io/ labels.
        ("sets a vramfit.io/ label of another Node", "UPDATE", bf16, False, {NODE_NAME_EXTRA: ["gpu-2"]}),
        ("changes nothing on another Node", "UPDATE", changed(lambda n: None), False, {NODE_NAME_EXTRA: ["gpu-2"]}),
        # A token not bound to a pod on a node (a Secret token, impersonation): no Node.
        ("sets a vramfit.io/ label with a token without a node name", "UPDATE", bf16, False, None),
        ("sets a vramfit.io/ label with a token with other extras only", "UPDATE", bf16, False,
         {"authentication.kubernetes.io/pod-name": ["vramfit-agent-x"]}),
        ("sets a vramfit.io/ label with a token naming two nodes", "UPDATE", bf16, False,
         {NODE_NAME_EXTRA: ["gpu-1", "gpu-2"]}),
        ("sets a vramfit.io/ label with a token naming no node", "UPDATE", bf16, False, {NODE_NAME_EXTRA: []}),
    ], node


def the_policy(report: Report, objects: list[dict[str, Any]], what: str, suffix: str) -> dict[str, Any] | None:
    """The one ValidatingAdmissionPolicy whose name ends with `suffix`."""
    policies = [o for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"].endswith(suffix)]
    if len(policies) != 1:
        report.fail(what, f"expected 1 ValidatingAdmissionPolicy named *{suffix}, found {len(policies)}")
        return None
    return policies[0]


def check_label_guard(report: Report, objects: list[dict[str, Any]]) -> None:
    policies = [p for p in [the_policy(report, objects, "agent label guard", "-agent-label-guard")] if p]
    if not policies:
        return
    spec = policies[0]["spec"]
    env = celpy.Environment()

    def compiled(expression: str | None) -> Any:
        return env.program(env.compile(expression)) if expression else None

    programs = [(v.get("message", ""), compiled(v["expression"]), compiled(v.get("messageExpression")))
                for v in spec["validations"]]
    conditions = [env.program(env.compile(c["expression"])) for c in spec.get("matchConditions", [])]
    agent = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-agent"
    cases, old = label_guard_cases()
    problems = []

    def activation(user: str, operation: str, new: dict[str, Any] | None, extra: Any) -> Any:
        # The API server leaves out an empty extra (omitempty): so does the test.
        user_info: dict[str, Any] = {"username": user}
        if extra is not None:
            user_info["extra"] = extra
        return celpy.json_to_cel({
            "request": {"operation": operation, "userInfo": user_info},
            "object": new, "oldObject": old if operation == "UPDATE" else None,
        })

    def denials(act: Any) -> list[str]:
        denied = []
        for message, program, message_program in programs:
            try:
                result = program.evaluate(act)
                ok = isinstance(result, celpy.celtypes.BoolType) and bool(result)
            except Exception as e:  # an evaluation error denies too (failurePolicy: Fail)
                ok, message = False, f"{message} (error: {e})"
            if not ok and message_program is not None:
                try:
                    message = str(message_program.evaluate(act))
                except Exception as e:  # noqa: BLE001 - the API server falls back to message
                    problems.append(f"messageExpression failed ({e}); message {message!r}")
            if not ok:
                denied.append(message)
        return denied

    for name, operation, new, allowed, extra in cases:
        act = activation(agent, operation, new, extra)
        if not all(bool(c.evaluate(act)) for c in conditions):
            problems.append(f"the policy does not apply to {agent}")
            break
        denied = denials(act)
        if allowed and denied:
            problems.append(f"the agent {name}: denied ({'; '.join(denied)}), should be allowed")
        if not allowed and not denied:
            problems.append(f"the agent {name}: allowed, should be denied")
    # The refusal of another Node says whose token it is and which Node it tried.
    bf16_elsewhere = next(c for c in cases if c[0] == "sets a vramfit.io/ label of another Node")
    wanted = "its token belongs to node gpu-2, it tried to change node gpu-1"
    seen = denials(activation(agent, "UPDATE", bf16_elsewhere[2], bf16_elsewhere[4]))
    if not any(wanted in m for m in seen):
        problems.append(f"another Node's refusal does not say {wanted!r}: {seen}")
    unbound = denials(activation(agent, "UPDATE", bf16_elsewhere[2], None))
    if not any("names no single node" in m and "gpu-1" in m for m in unbound):
        problems.append(f"a token without a node name: the refusal does not say so: {unbound}")
    other = activation("system:serviceaccount:kube-system:node-controller", "UPDATE", cases[4][2], None)
    if all(bool(c.evaluate(other)) for c in conditions):
        problems.append("the policy also applies to other users")
    if problems:
        report.fail("agent label guard (CEL)", problems)
    else:
        report.ok(f"agent label guard (CEL): {len(cases)} changes by the agent allowed/denied as expected "
                  "(own Node only, by the token's node name), other users untouched")


def check_cache_agent_guard(report: Report, objects: list[dict[str, Any]]) -> None:
    """The cache agent status guard's CEL (ci/model-cache-values.yaml): the cache agent's
    token may update the status of the ModelCache named after its node, and nothing else."""
    what = "cache agent status guard (CEL)"
    policy = the_policy(report, objects, what, "-cache-agent-status-guard")
    if policy is None:
        return
    env = celpy.Environment()
    spec = policy["spec"]
    programs = [(v["message"], env.program(env.compile(v["expression"]))) for v in spec["validations"]]
    conditions = [env.program(env.compile(c["expression"])) for c in spec.get("matchConditions", [])]
    user = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-cache-agent"
    old = {"metadata": {"name": "gpu-1", "labels": {"team": "a"}},
           "spec": {"models": [{"repo": "org/m", "revision": "main"}]},
           "status": {"usedBytes": 0}}

    def changed(change: Any) -> dict[str, Any]:
        new = copy.deepcopy(old)
        change(new)
        return new

    status = changed(lambda o: o["status"].update({"usedBytes": 5}))
    own = {NODE_NAME_EXTRA: ["gpu-1"]}
    cases = [
        ("writes its node's status", "UPDATE", "status", status, own, True),
        ("writes another node's status", "UPDATE", "status", status, {NODE_NAME_EXTRA: ["gpu-2"]}, False),
        ("writes a status with a token without a node name", "UPDATE", "status", status, None, False),
        ("changes the spec through the status", "UPDATE", "status",
         changed(lambda o: o["spec"].update({"models": []})), own, False),
        ("changes a label through the status", "UPDATE", "status",
         changed(lambda o: o["metadata"].update({"labels": {}})), own, False),
        ("adds a finalizer", "UPDATE", "status", changed(lambda o: o["metadata"].update({"finalizers": ["x"]})),
         own, False),
        ("updates the object itself", "UPDATE", "", status, own, False),
        ("creates its ModelCache", "CREATE", "", old, own, False),
        ("deletes its ModelCache", "DELETE", "", None, own, False),
    ]
    problems = []
    for name, operation, subresource, new, extra, allowed in cases:
        user_info: dict[str, Any] = {"username": user}
        if extra is not None:
            user_info["extra"] = extra
        act = celpy.json_to_cel({
            "request": {"operation": operation, "userInfo": user_info, "name": "gpu-1",
                        "subResource": subresource},
            "object": new, "oldObject": old if operation != "CREATE" else None,
        })
        if not all(bool(c.evaluate(act)) for c in conditions):
            problems.append(f"the policy does not apply to {user}")
            break
        denied = []
        for message, program in programs:
            try:
                ok = bool(program.evaluate(act))
            except Exception:  # noqa: BLE001 - an evaluation error denies (failurePolicy: Fail)
                ok = False
            if not ok:
                denied.append(message)
        if allowed and denied:
            problems.append(f"the cache agent {name}: denied ({'; '.join(denied)}), should be allowed")
        if not allowed and not denied:
            problems.append(f"the cache agent {name}: allowed, should be denied")
    if spec_binding := [o for o in objects if o.get("kind") == "ValidatingAdmissionPolicyBinding"
                        and o["metadata"]["name"] == policy["metadata"]["name"]]:
        if spec_binding[0]["spec"].get("validationActions") != ["Deny"]:
            problems.append(f"binding actions {spec_binding[0]['spec'].get('validationActions')}, expected [Deny]")
    else:
        problems.append("no binding")
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: {len(cases)} writes by the cache agent allowed/denied as expected "
                  "(its own node's ModelCache, status only)")


def policy_denials(policy: dict[str, Any], act: Any) -> list[str]:
    """The messages of `policy`'s validations that deny activation `act` (an evaluation
    error denies too: failurePolicy Fail)."""
    env = celpy.Environment()
    spec = policy["spec"]
    variables = {v["name"]: env.program(env.compile(v["expression"])) for v in spec.get("variables", [])}
    if variables:
        # cel-python has no lazy `variables`: evaluate them first and pass them as a map.
        base = dict(act)
        values = {name: program.evaluate(base) for name, program in variables.items()}
        act = dict(act)
        act["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in values.items()})
    denied = []
    for validation in spec["validations"]:
        try:
            ok = bool(env.program(env.compile(validation["expression"])).evaluate(act))
        except Exception:  # noqa: BLE001 - an evaluation error denies (failurePolicy: Fail)
            ok = False
        if not ok:
            denied.append(validation["message"])
    return denied


def check_binding_denies(policy: dict[str, Any], objects: list[dict[str, Any]], problems: list[str]) -> None:
    bindings = [o for o in objects if o.get("kind") == "ValidatingAdmissionPolicyBinding"
                and o["spec"].get("policyName") == policy["metadata"]["name"]]
    if not bindings:
        problems.append("no binding")
    elif bindings[0]["spec"].get("validationActions") != ["Deny"]:
        problems.append(f"binding actions {bindings[0]['spec'].get('validationActions')}, expected [Deny]")


def check_model_volume_guard(report: Report, objects: list[dict[str, Any]], root: str) -> None:
    """The model-cache volume guard's CEL (ci/model-cache-values.yaml): the operator's token
    may create only a ReadOnlyMany hostPath volume of type Directory exactly two levels under
    `<root>/served/`, claimed by a vramfit-model-… claim and labelled as a model volume, and
    delete only volumes so labelled; other users are untouched."""
    what = "model-cache volume guard (CEL)"
    policy = the_policy(report, objects, what, "-model-cache-volume-guard")
    if policy is None:
        return
    env = celpy.Environment()
    conditions = [env.program(env.compile(c["expression"])) for c in policy["spec"].get("matchConditions", [])]
    operator = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-operator"
    served = f"{root}/served"

    def volume(path: str, **changes: Any) -> dict[str, Any]:
        pv = {"metadata": {"name": "vramfit-model-0123456789abcdef",
                           "labels": {"vramfit.io/model-cache": "true"}},
              "spec": {"accessModes": ["ReadOnlyMany"], "hostPath": {"path": path, "type": "Directory"},
                       "claimRef": {"namespace": "team-a", "name": "vramfit-model-chat-0a1b2c3d"}}}
        for key, value in changes.items():
            if key == "labels":
                pv["metadata"]["labels"] = value
            else:
                pv["spec"][key] = value
        return pv

    good = volume(f"{served}/org--model/main")
    cases = [
        ("creates a model's served folder", "CREATE", good, None, True),
        ("creates an encoded revision's folder", "CREATE", volume(f"{served}/org--model/refs%2Fpr%2F1"), None, True),
        ("creates the served root itself", "CREATE", volume(served), None, False),
        ("creates the served root with a slash", "CREATE", volume(f"{served}/"), None, False),
        ("creates one level below the served root", "CREATE", volume(f"{served}/org--model"), None, False),
        ("creates three levels below the served root", "CREATE",
         volume(f"{served}/org--model/main/sub"), None, False),
        ("creates a folder with an empty segment", "CREATE", volume(f"{served}//main"), None, False),
        ("creates a folder with a trailing slash", "CREATE", volume(f"{served}/org--model/main/"), None, False),
        ("creates a '..' path", "CREATE", volume(f"{served}/../models"), None, False),
        ("creates a '..' revision", "CREATE", volume(f"{served}/org--model/.."), None, False),
        ("creates a '.' revision", "CREATE", volume(f"{served}/org--model/."), None, False),
        ("creates the writable models folder", "CREATE", volume(f"{root}/models/org--model/main"), None, False),
        ("creates another folder of the node", "CREATE", volume("/etc/kubernetes/x"), None, False),
        ("creates a DirectoryOrCreate volume", "CREATE",
         volume(f"{served}/org--model/main", hostPath={"path": f"{served}/org--model/main",
                                                        "type": "DirectoryOrCreate"}), None, False),
        ("creates a ReadWriteOnce volume", "CREATE",
         volume(f"{served}/org--model/main", accessModes=["ReadWriteOnce"]), None, False),
        ("creates a volume for a claim of another name", "CREATE",
         volume(f"{served}/org--model/main", claimRef={"namespace": "team-a", "name": "mine"}), None, False),
        ("creates an unlabelled volume", "CREATE", volume(f"{served}/org--model/main", labels={}), None, False),
        ("updates a model volume", "UPDATE", good, good, True),
        ("updates a volume to the models folder", "UPDATE",
         volume(f"{root}/models/org--model/main"), good, False),
        ("deletes a model volume", "DELETE", None, good, True),
        ("deletes another volume", "DELETE", None, volume("/data/x", labels={"team": "a"}), False),
        ("deletes an unlabelled volume", "DELETE", None, {"metadata": {"name": "pv-1"}, "spec": {}}, False),
    ]
    problems: list[str] = []
    for name, operation, new, old, allowed in cases:
        act = celpy.json_to_cel({"request": {"operation": operation, "userInfo": {"username": operator}},
                                 "object": new, "oldObject": old})
        if not all(bool(c.evaluate(act)) for c in conditions):
            problems.append(f"the policy does not apply to {operator}")
            break
        denied = policy_denials(policy, act)
        if allowed and denied:
            problems.append(f"the operator {name}: denied ({'; '.join(denied)}), should be allowed")
        if not allowed and not denied:
            problems.append(f"the operator {name}: allowed, should be denied")
    other = celpy.json_to_cel({"request": {"operation": "DELETE", "userInfo": {"username": "admin"}},
                               "object": None, "oldObject": good})
    if all(bool(c.evaluate(other)) for c in conditions):
        problems.append("the policy also applies to other users")
    check_binding_denies(policy, objects, problems)
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: {len(cases)} writes by the operator allowed/denied as expected "
                  f"(exactly {served}/<owner>--<name>/<revision>; deletes only model volumes)")


def check_model_pod_guard(report: Report, objects: list[dict[str, Any]]) -> None:
    """The model-cache pod guard's CEL (ci/model-cache-values.yaml): any pod that mounts a model
    claim (vramfit-model-…, or an older operator's <job>-model-<8 hex>) must mount it with
    persistentVolumeClaim.readOnly true; no ephemeral volume may name a model volume."""
    what = "model-cache pod guard (CEL)"
    policy = the_policy(report, objects, what, "-model-cache-pod-guard")
    if policy is None:
        return
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    problems: list[str] = []
    if [(r["resources"], r["operations"]) for r in rules] != [(["pods"], ["CREATE"])]:
        problems.append(f"it should match pod creations only: {rules}")
    if policy["spec"].get("matchConditions"):
        problems.append("it should apply to every user (no matchConditions)")

    def pod(*volumes: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
        if volumes:
            spec["volumes"] = list(volumes)
        return {"metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}

    def claim(name: str, read_only: Any = None) -> dict[str, Any]:
        source: dict[str, Any] = {"claimName": name}
        if read_only is not None:
            source["readOnly"] = read_only
        return {"name": "model", "persistentVolumeClaim": source}

    ephemeral = {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "volumeName": "vramfit-model-0123456789abcdef"}}}}
    cases = [
        ("a pod without volumes", pod(), True),
        ("a pod mounting a model claim read-only", pod(claim("vramfit-model-chat-0a1b2c3d", True)), True),
        ("a pod mounting a model claim read-write", pod(claim("vramfit-model-chat-0a1b2c3d", False)), False),
        ("a pod mounting a model claim without readOnly", pod(claim("vramfit-model-chat-0a1b2c3d")), False),
        ("a pod mounting an older operator's model claim read-write", pod(claim("chat-model-0a1b2c3d")), False),
        ("a pod mounting an older operator's model claim read-only",
         pod(claim("chat-model-0a1b2c3d", True)), True),
        ("a pod mounting its own claim read-write", pod(claim("data")), True),
        ("a pod mounting a model claim among others",
         pod({"name": "tmp", "emptyDir": {}}, claim("data"), claim("vramfit-model-x-00000000")), False),
        ("a pod with an ephemeral volume naming a model volume", pod(ephemeral), False),
        ("a pod with an ordinary ephemeral volume",
         pod({"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}),
         True),
    ]
    for name, new, allowed in cases:
        act = celpy.json_to_cel({"request": {"operation": "CREATE", "userInfo": {"username": TENANT}},
                                 "object": new, "oldObject": None})
        denied = policy_denials(policy, act)
        if allowed and denied:
            problems.append(f"{name}: denied ({'; '.join(denied)}), should be allowed")
        if not allowed and not denied:
            problems.append(f"{name}: allowed, should be denied")
    check_binding_denies(policy, objects, problems)
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: {len(cases)} pods allowed/denied as expected (model claims read-only only)")


# The fake authorizer of check_pod_trust: `authorizer.group(g).resource(r).namespace(n)
# .check(verb).allowed()` builds up a map of the question, and allowed() answers it from
# GRANTS (cel-python calls a member function f(target, args...) as f(target, args...)).
# TENANT may create InferenceJobs only, TENANT_EXPOSER also Services, TENANT_ADMIN also pods.
TENANT = "system:serviceaccount:team-a:tenant"
TENANT_EXPOSER = "system:serviceaccount:team-a:tenant-exposer"
TENANT_ADMIN = "system:serviceaccount:team-a:tenant-admin"
GRANTS = {(TENANT_ADMIN, "", "pods", "team-a", "create"), (TENANT_EXPOSER, "", "services", "team-a", "create")}


def _ask(key: str) -> Any:
    def add(target: Any, value: Any) -> Any:
        return celpy.celtypes.MapType({**target, celpy.celtypes.StringType(key): value})
    return add


def _allowed(question: Any) -> Any:
    q = {str(k): str(v) for k, v in question.items()}
    return celpy.celtypes.BoolType(
        (q.get("user"), q.get("group"), q.get("resource"), q.get("namespace"), q.get("verb")) in GRANTS)


def _null_aware(equal: bool) -> Any:
    """`==`/`!=` with null on one side, as the CEL spec's heterogeneous equality (and so
    the API server's cel-go) has it; cel-python 0.5 raises "no such overload" instead."""
    def compare(a: Any, b: Any) -> Any:
        if a is None or b is None:
            return celpy.celtypes.BoolType((a is None and b is None) == equal)
        return celpy.celtypes.BoolType((a == b) == equal)
    return compare


POD_TRUST_FUNCTIONS = {"group": _ask("group"), "resource": _ask("resource"), "namespace": _ask("namespace"),
                       "check": _ask("verb"), "allowed": _allowed,
                       "_==_": _null_aware(True), "_!=_": _null_aware(False)}


# The keys the second pod trust render lets anyone set (inferenceJobPodTrust.allowed*Keys).
OPEN_POD_KEYS = {"allowedLabelKeys": ["team", "example.com/*"], "allowedAnnotationKeys": ["prometheus.io/*"]}


def pod_trust_cases(open_keys: bool) -> list[tuple[str, str, dict[str, Any], dict[str, Any] | None,
                                                  dict[str, list[str]]]]:
    """(case, operation, job, old job or None, {user: field names whose rule must deny});
    a user not named is allowed. `open_keys`: the policy was rendered with OPEN_POD_KEYS."""
    job = {
        "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": {"runtime": "custom", "image": "busybox", "model": {"parameters": 1000000}},
    }

    def with_pod(**pod: Any) -> dict[str, Any]:
        new = copy.deepcopy(job)
        new["spec"]["pod"] = pod
        return new

    # The fields denied to the users who may not create pods.
    tenant_only = lambda *fields: {TENANT: list(fields), TENANT_EXPOSER: list(fields)}  # noqa: E731

    def served(**serve: Any) -> dict[str, Any]:
        new = copy.deepcopy(job)
        new["spec"]["serve"] = {"healthPath": "/health", **serve}
        return new

    # A Service type other than ClusterIP needs `create services`; pod rights do not give it.
    unexposing = {TENANT: ["spec.serve.serviceType"], TENANT_ADMIN: ["spec.serve.serviceType"]}
    node_port = served(serviceType="NodePort")
    node_port_relabelled = copy.deepcopy(node_port)
    node_port_relabelled["metadata"]["labels"] = {"team": "a"}
    secret = [{"name": "s", "secret": {"secretName": "s"}}]
    host = [{"name": "h", "hostPath": {"path": "/"}}]
    value_from = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with_sa = with_pod(serviceAccountName="builder")
    relabelled = copy.deepcopy(with_sa)
    relabelled["metadata"]["labels"] = {"team": "a"}
    new_image = copy.deepcopy(with_sa)
    new_image["spec"]["image"] = "evil"
    old_host = with_pod(volumes=host)
    old_host_finalized = copy.deepcopy(old_host)
    old_host_finalized["metadata"]["finalizers"] = []
    return [
        ("a plain job", "CREATE", job, None, {}),
        ("spec.pod: null", "CREATE", {**job, "spec": {**job["spec"], "pod": None}}, None, {}),
        ("nodeSelector, native resources, volumeMounts, plain env", "CREATE",
         with_pod(nodeSelector={"a": "b"}, resources={"limits": {"cpu": "1", "memory": "1Gi"},
                                                      "requests": {"hugepages-2Mi": "2Mi"}},
                  volumeMounts=[{"name": "x", "mountPath": "/x"}], env=[{"name": "A", "value": "b"}]), None, {}),
        ("null or empty trust fields", "CREATE",
         with_pod(serviceAccountName=None, priorityClassName=None, volumes=[], tolerations=[], env=[],
                  labels={}, annotations={}, resources=None), None, {}),
        ("a label", "CREATE", with_pod(labels={"role": "db"}), None, tenant_only("labels")),
        ("an annotation", "CREATE", with_pod(annotations={"sidecar.istio.io/inject": "false"}), None,
         tenant_only("annotations")),
        ("labels and annotations on the admin's lists", "CREATE",
         with_pod(labels={"team": "a", "example.com/cost-center": "7"},
                  annotations={"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}), None,
         {} if open_keys else tenant_only("labels", "annotations")),
        ("a listed label with an unlisted one", "CREATE", with_pod(labels={"team": "a", "app": "web"}), None,
         tenant_only("labels")),
        ("a prefix of a listed prefix", "CREATE", with_pod(labels={"example.com": "x", "example.co/x": "y"}),
         None, tenant_only("labels")),
        ("an extended resource limit", "CREATE", with_pod(resources={"limits": {"devices.kubevirt.io/kvm": "1"}}),
         None, tenant_only("resources")),
        ("an extended resource request", "CREATE",
         with_pod(resources={"requests": {"cpu": "1", "smarter-devices/fuse": "1"}}), None, tenant_only("resources")),
        ("spec.pod.serviceAccountName", "CREATE", with_sa, None, tenant_only("serviceAccountName")),
        ("a secret volume", "CREATE", with_pod(volumes=secret), None, tenant_only("volumes")),
        ("env valueFrom a Secret", "CREATE", with_pod(env=value_from), None, tenant_only("env[].valueFrom")),
        ("a toleration", "CREATE", with_pod(tolerations=[{"operator": "Exists"}]), None, tenant_only("tolerations")),
        ("spec.pod.priorityClassName", "CREATE", with_pod(priorityClassName="high"), None,
         tenant_only("priorityClassName")),
        ("a hostPath volume", "CREATE", with_pod(volumes=host), None,
         {TENANT: ["volumes", "hostPath"], TENANT_EXPOSER: ["volumes", "hostPath"], TENANT_ADMIN: ["hostPath"]}),
        ("a served job without serviceType", "CREATE", served(), None, {}),
        ("a served job, ClusterIP", "CREATE", served(serviceType="ClusterIP"), None, {}),
        ("a served job, NodePort", "CREATE", node_port, None, unexposing),
        ("a served job, LoadBalancer", "CREATE", served(serviceType="LoadBalancer"), None, unexposing),
        ("an update from ClusterIP to NodePort", "UPDATE", node_port, served(serviceType="ClusterIP"), unexposing),
        ("an update of a NodePort job's labels only (spec unchanged)", "UPDATE", node_port_relabelled, node_port,
         {}),
        ("an update of the labels only (spec unchanged)", "UPDATE", relabelled, with_sa, {}),
        ("an update of a hostPath job's finalizers (spec unchanged)", "UPDATE", old_host_finalized, old_host, {}),
        ("an update of the image of a job with a ServiceAccount", "UPDATE", new_image, with_sa,
         tenant_only("serviceAccountName")),
    ]


def pod_trust_denials(spec: dict[str, Any], user: str, operation: str, new: dict[str, Any],
                      old: dict[str, Any] | None) -> list[str]:
    """The messages of the rules of the pod trust policy that deny the request (an
    evaluation error denies too: failurePolicy Fail). Variables are evaluated in order
    into `variables`, as the API server does (it evaluates them lazily: same result)."""
    env = celpy.Environment()

    def run(expression: str, data: dict[str, Any]) -> Any:
        return env.program(env.compile(expression), functions=POD_TRUST_FUNCTIONS).evaluate(
            celpy.json_to_cel(data) if not isinstance(data, celpy.celtypes.MapType) else data)

    base = {
        "request": {"operation": operation, "userInfo": {"username": user}, "namespace": new["metadata"]["namespace"]},
        "object": new, "oldObject": old, "authorizer": {"user": user},
    }
    activation = celpy.json_to_cel(base)
    variables: dict[Any, Any] = {}
    for v in spec.get("variables") or []:
        activation[celpy.celtypes.StringType("variables")] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(v["name"])] = run(v["expression"], activation)
    activation[celpy.celtypes.StringType("variables")] = celpy.celtypes.MapType(variables)
    denied = []
    for rule in spec["validations"]:
        try:
            result = run(rule["expression"], activation)
            ok = isinstance(result, celpy.celtypes.BoolType) and bool(result)
        except Exception as e:  # noqa: BLE001
            ok, rule = False, {**rule, "message": f"{rule['message']} (error: {e})"}
        if ok:
            continue
        message = rule["message"]
        if rule.get("messageExpression"):
            # The API server falls back to `message` when messageExpression fails: a test
            # must not, so a failure shows as the message.
            try:
                message = str(run(rule["messageExpression"], activation))
            except Exception as e:  # noqa: BLE001
                message = f"{message} (messageExpression error: {e})"
        denied.append(message)
    return denied


def check_pod_trust(report: Report, objects: list[dict[str, Any]], open_keys: bool = False) -> None:
    what = "InferenceJob pod trust policy (CEL)" + (
        f", with {', '.join(f'{k} {v}' for k, v in OPEN_POD_KEYS.items())}" if open_keys else "")
    policy = the_policy(report, objects, what, "-inferencejob-pod-trust")
    if policy is None:
        return
    spec = policy["spec"]
    cases = pod_trust_cases(open_keys)
    problems = []
    for name, operation, new, old, denials in cases:
        for user in (TENANT, TENANT_EXPOSER, TENANT_ADMIN):
            try:
                denied = pod_trust_denials(spec, user, operation, new, old)
            except Exception as e:  # noqa: BLE001 - a variable that fails to evaluate
                problems.append(f"{name} by {user}: evaluation failed: {e}")
                continue
            wanted = denials.get(user, [])
            # Each message names its field ("spec.pod.<field> needs permission …"); the
            # hostPath rule's names hostPath.
            seen = sorted("hostPath" if "hostPath" in m else m.removeprefix("spec.pod.").split(" ")[0]
                          for m in denied)
            if sorted(wanted) != seen:
                problems.append(f"{name} by {user}: denied for {sorted(wanted) or 'nothing'}, "
                                f"seen {denied or 'allowed'}")
            problems += [f"{name} by {user}: {m}" for m in denied if "error" in m]
    # The message names the key or resource that needs the rights.
    named = {"a label": "for the label role:", "an annotation": "for the annotation sidecar.istio.io/inject:",
             "an extended resource limit": "for the extended resource devices.kubevirt.io/kvm:",
             "a served job, NodePort": "spec.serve.serviceType NodePort needs permission to create services",
             "a served job, LoadBalancer": "spec.serve.serviceType LoadBalancer needs permission to create services"}
    for name, operation, new, old, _ in cases:
        if name in named:
            denied = pod_trust_denials(spec, TENANT, operation, new, old)
            if not any(named[name] in m for m in denied):
                problems.append(f"{name}: the refusal does not say {named[name]!r}: {denied}")
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: {len(cases)} jobs by users who may create pods, services or neither, "
                  "allowed/denied as expected (fake authorizer)")


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def ok(self, what: str) -> None:
        self.passed += 1
        print(f"ok    {what}")

    def fail(self, what: str, details: list[str] | str = ()) -> None:
        self.failed += 1
        print(f"FAIL  {what}")
        for line in [details] if isinstance(details, str) else details:
            print(f"        {line}")


def load_values_file(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


async def check_lint(report: Report, label: str, values: dict[str, Any] | None) -> None:
    findings = await lint(values)
    errors = [f"[{SEVERITY.get(s, s)}] {p}" for s, p in findings if s >= ERROR_SEVERITY]
    others = [f"[{SEVERITY.get(s, s)}] {p}" for s, p in findings if s < ERROR_SEVERITY]
    if errors:
        details = errors
        try:
            await render(values)
        except helm_sdkpy.HelmError as e:
            details = errors + [f"helm: {e}"]
        report.fail(f"lint ({label})", details)
    else:
        note = f" ({len(others)} non-error finding(s): {', '.join(others)})" if others else ""
        report.ok(f"lint ({label}){note}")


# What NOTES.txt must tell a user after the default install.
NOTES_MUST_SAY = ["kubectl get ij", "kubectl get nodes -L vramfit.io/gpu.product,vramfit.io/gpu.count",
                  "kubectl apply -f examples/mistral-vllm.yaml"]
NOTES_EXAMPLE = ROOT / "examples" / "mistral-vllm.yaml"


async def check_render(report: Report, label: str, values: dict[str, Any] | None) -> str | None:
    try:
        release = await render_release(values)
    except helm_sdkpy.HelmError as e:
        report.fail(f"render ({label})", f"helm: {e}")
        return None
    manifest = release["manifest"]
    notes = (release.get("info") or {}).get("notes") or ""
    missing = [f"does not say {s!r}" for s in NOTES_MUST_SAY if s not in notes]
    if not NOTES_EXAMPLE.exists():
        missing.append(f"names {NOTES_EXAMPLE.relative_to(ROOT)}, which does not exist")
    if values is None:
        if missing:
            report.fail("NOTES.txt (default values)", missing)
        else:
            report.ok(f"NOTES.txt (default values): {len(notes.splitlines())} lines with the next steps")
    objects = split_manifest(manifest)
    errors = k8s_schema_errors(objects)
    if errors:
        report.fail(f"render ({label}): {len(objects)} objects, Kubernetes {KUBE_FLOOR} schema (strict)", errors)
    else:
        report.ok(f"render ({label}): {len(objects)} objects valid against Kubernetes {KUBE_FLOOR} (strict)")
    return manifest


async def check_rejected(report: Report, label: str, values: dict[str, Any], expect: str,
                         by_schema: bool = True) -> None:
    """A wrong value must fail install with a message naming `expect`, and, when
    values.schema.json rejects it (`by_schema`), lint with an error-severity finding.
    (Helm's lint mode does not stop at a template's `fail`: only install shows those.)"""
    findings = await lint(values)
    lint_errors = [f"{SEVERITY.get(s, s)} {p}" for s, p in findings if s >= ERROR_SEVERITY]
    try:
        await render(values)
        message = None
    except helm_sdkpy.HelmError as e:
        message = str(e)
    if by_schema and not lint_errors:
        report.fail(f"rejects {label}", "helm lint found no error")
    elif message is None:
        report.fail(f"rejects {label}", "helm install accepted it")
    elif expect not in message:
        report.fail(f"rejects {label}", f"the error does not mention {expect!r}: {message}")
    else:
        first = message.strip().splitlines()[-1].strip()
        linted = f"lint {', '.join(lint_errors)}; " if by_schema else ""
        report.ok(f"rejects {label}: {linted}install: {first[:160]}")


async def check_policy_refusals(report: Report, key: str, accept: str, policy: str) -> None:
    """The chart refuses to render without the admission policy at `key` denying (off, or
    validationActions without Deny), naming `<key>.<accept>`, the value that accepts it."""
    await check_rejected(report, f"{policy} off ({key}.enabled: false)", {key: {"enabled": False}}, accept,
                         by_schema=False)
    await check_rejected(report, f"{policy} without Deny ({key}.validationActions: [Warn, Audit])",
                         {key: {"validationActions": ["Warn", "Audit"]}}, accept, by_schema=False)
    await check_rejected(report, f'{key}.{accept}: "yes"', {key: {accept: "yes"}}, accept)


async def check_unguarded_accepted(report: Report) -> None:
    """agentLabelGuard.enabled: false with acceptUnguardedAgent: the agent without a policy."""
    what = "renders the agent unguarded when agentLabelGuard.acceptUnguardedAgent is true"
    try:
        objects = split_manifest(await render({"agentLabelGuard": {"enabled": False, "acceptUnguardedAgent": True}}))
    except helm_sdkpy.HelmError as e:
        report.fail(what, f"helm: {e}")
        return
    kinds = {(o.get("kind"), o["metadata"]["name"]) for o in objects}
    problems = [] if ("DaemonSet", f"{RELEASE}-agent") in kinds else ["no agent DaemonSet"]
    problems += [f"{kind} {name} rendered" for kind, name in sorted(kinds)
                 if name.endswith("-agent-label-guard")]
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: the DaemonSet, no policy")


async def check_unguarded_jobs_accepted(report: Report) -> None:
    """inferenceJobPodTrust.enabled: false with acceptUnguardedJobs: no pod trust policy."""
    what = "renders without the pod trust policy when inferenceJobPodTrust.acceptUnguardedJobs is true"
    try:
        objects = split_manifest(await render({"inferenceJobPodTrust": {"enabled": False,
                                                                        "acceptUnguardedJobs": True}}))
    except helm_sdkpy.HelmError as e:
        report.fail(what, f"helm: {e}")
        return
    policies = [o["metadata"]["name"] for o in objects if o["metadata"]["name"].endswith("-inferencejob-pod-trust")]
    operators = [o for o in objects if o.get("kind") == "Deployment"]
    if policies or len(operators) != 1:
        report.fail(what, f"expected the operator and no policy, seen policy {policies}, "
                          f"{len(operators)} Deployment(s)")
    else:
        report.ok(f"{what}: the operator, no policy")


def workload_images(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The container images of the chart's Deployment and DaemonSet, by component."""
    found: dict[str, list[str]] = {}
    for o in objects:
        if o.get("kind") in ("Deployment", "DaemonSet"):
            component = o["metadata"]["labels"]["app.kubernetes.io/component"]
            found[component] = [c["image"] for c in o["spec"]["template"]["spec"]["containers"]]
    return found


async def check_image_pinning(report: Report) -> None:
    """A release pins both images by digest: scripts/pin_images.py writes them into
    values.yaml, and the render then pulls every image by exactly that digest; without a
    digest the chart refuses to render unless images.allowTags says so."""
    what = "images by digest: scripts/pin_images.py's values render every image as repository@digest"
    defaults_text = (CHART / "values.yaml").read_text()
    defaults = yaml.safe_load(defaults_text)
    digests = {c: "sha256:" + f"{i + 1:x}" * 64 for i, c in enumerate(IMAGE_COMPONENTS)}
    problems = []
    try:
        pinned_text = pin_images.pin(defaults_text, digests)
        pinned = yaml.safe_load(pinned_text)
        changed = [line for line in difflib.ndiff(defaults_text.splitlines(), pinned_text.splitlines())
                   if line.startswith(("+ ", "- "))]
        if len(changed) > 2 * len(IMAGE_COMPONENTS):
            problems.append(f"pin_images changed more than the digest lines: {changed}")
        images = workload_images(split_manifest(await render(deep_merge(pinned, {"images": {"allowTags": False}}))))
        for c in IMAGE_COMPONENTS:
            want = [f"{defaults[c]['image']['repository']}@{digests[c]}"]
            if images.get(c) != want:
                problems.append(f"{c}: images {images.get(c)}, expected {want}")
    except (pin_images.PinError, helm_sdkpy.HelmError) as e:
        problems.append(f"{type(e).__name__}: {e}")
    try:
        pin_images.pin(defaults_text, {"operator": "sha256:abc"})
        problems.append("pin_images accepted the digest sha256:abc")
    except pin_images.PinError:
        pass
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what} (values.yaml {'pins them' if DEFAULTS_PINNED else 'has no digests yet: between releases'})")

    what = "images.allowTags renders an image without a digest as repository:appVersion"
    unpinned = {c: {"image": {"digest": ""}} for c in IMAGE_COMPONENTS}
    try:
        images = workload_images(split_manifest(await render({**unpinned, "images": {"allowTags": True}})))
        app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
        wrong = {c: i for c, i in images.items()
                 if i != [f"{defaults[c]['image']['repository']}:{app_version}"]}
        if wrong or sorted(images) != sorted(IMAGE_COMPONENTS):
            report.fail(what, f"seen {images}")
        else:
            report.ok(what)
    except helm_sdkpy.HelmError as e:
        report.fail(what, f"helm: {e}")
    for component in IMAGE_COMPONENTS:
        one_unpinned = {**{c: {"image": {"digest": digests[c]}} for c in IMAGE_COMPONENTS},
                        component: {"image": {"digest": ""}}, "images": {"allowTags": False}}
        await check_rejected(report, f"{component}.image.digest empty without images.allowTags", one_unpinned,
                             f"{component}.image.digest is empty", by_schema=False)
    await check_rejected(report, 'operator.image.digest: "sha256:latest"',
                         {"operator": {"image": {"digest": "sha256:latest"}}}, "digest")

    what = "the cache agent's image by digest: scripts/pin_images.py --cache-agent pins modelCache.agent.image"
    try:
        digest = "sha256:" + "c" * 64
        pinned = yaml.safe_load(pin_images.pin(defaults_text, {**digests, "cache-agent": digest}))
        objects = split_manifest(await render(deep_merge(pinned, {"images": {"allowTags": False},
                                                                  "modelCache": {"enabled": True}})))
        daemonset = next(o for o in objects if o.get("kind") == "DaemonSet"
                         and o["metadata"]["labels"]["app.kubernetes.io/component"] == "cache-agent")
        pod = daemonset["spec"]["template"]["spec"]
        images = [c["image"] for c in pod["initContainers"] + pod["containers"]]
        want = f"{defaults['modelCache']['agent']['image']['repository']}@{digest}"
        if len(images) != 3 or any(image != want for image in images):
            report.fail(what, f"images {images}, expected {want} for both init containers and the agent")
        else:
            report.ok(what)
    except (pin_images.PinError, helm_sdkpy.HelmError, StopIteration) as e:
        report.fail(what, f"{type(e).__name__}: {e}")


def network_policies(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o.get("kind") == "NetworkPolicy"}


async def check_network_policy(report: Report, default: list[dict[str, Any]],
                               all_enabled: list[dict[str, Any]], peers: list[dict[str, Any]]) -> None:
    """networkPolicy: off by default; on, one policy per component that selects exactly its
    pods and admits only its metrics port, from metricsFrom only; with no peer, no rule (an
    ingress rule without `from` would admit everyone)."""
    what = "NetworkPolicy for the metrics ports (networkPolicy)"
    problems = [f"the default render has {sorted(network_policies(default))}"] if network_policies(default) else []

    def check(objects: list[dict[str, Any]], label: str, want_peers: list[dict[str, Any]]) -> None:
        policies = network_policies(objects)
        for workload in [o for o in objects if o.get("kind") in ("Deployment", "DaemonSet")]:
            component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
            policy = policies.pop(f"{RELEASE}-{component}-metrics", None)
            if policy is None:
                problems.append(f"{label}: no NetworkPolicy {RELEASE}-{component}-metrics")
                continue
            spec = policy["spec"]
            ports = [p["containerPort"] for c in workload["spec"]["template"]["spec"]["containers"]
                     for p in c.get("ports", []) if p.get("name") == "metrics"]
            want_ingress = [{"from": want_peers, "ports": [{"protocol": "TCP", "port": p} for p in ports]}] \
                if want_peers else []
            if spec.get("podSelector") != {"matchLabels": workload["spec"]["selector"]["matchLabels"]}:
                problems.append(f"{label}: {component}: podSelector {spec.get('podSelector')} is not the "
                                f"{workload['kind']}'s selector")
            if spec.get("policyTypes") != ["Ingress"] or spec.get("ingress") != want_ingress:
                problems.append(f"{label}: {component}: policyTypes {spec.get('policyTypes')}, ingress "
                                f"{spec.get('ingress')}, expected [Ingress], {want_ingress}")
        if policies:
            problems.append(f"{label}: NetworkPolicies for no workload: {sorted(policies)}")

    check(all_enabled, "ci/all-enabled-values.yaml", peers)
    try:
        check(split_manifest(await render({"networkPolicy": {"enabled": True, "metricsFrom": []}})),
              "metricsFrom: []", [])
        operator_only = split_manifest(await render({"networkPolicy": {"enabled": True, "metricsFrom": peers},
                                                     "agent": {"enabled": False}}))
        check(operator_only, "agent.enabled: false", peers)
        problems += k8s_schema_errors(operator_only)
    except helm_sdkpy.HelmError as e:
        problems.append(f"helm: {e}")
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: none by default; one per component, its pods' selector, its metrics port only, "
                  "from metricsFrom only; no rule at all for an empty metricsFrom")


def check_hub_token(report: Report, default: list[dict[str, Any]], all_enabled: list[dict[str, Any]],
                    hub: dict[str, Any]) -> None:
    """operator.hub: by default no object grants anything on Secrets; with tokenSecret, one
    Role in the release namespace grants `get` on that one Secret, bound to the operator's
    ServiceAccount only, and the Deployment passes --hub-endpoint, --hub-token-secret and the
    token's namespaces and repositories."""
    what = "operator.hub.tokenSecret: get on that one Secret in the release namespace only"
    operator = f"{RELEASE}-operator"
    secret = hub["tokenSecret"]

    def secret_grants(objects: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
                for o in objects if o.get("kind") in ("Role", "ClusterRole")
                for r in o.get("rules") or [] if {"secrets", "*"} & set(r.get("resources", []))]

    problems = []
    if secret_grants(default):
        problems.append(f"the default render grants Secrets: {secret_grants(default)}")
    role_name = f"{operator}-hub-token"
    if secret_grants(all_enabled) != [("Role", NAMESPACE, role_name)]:
        problems.append(f"Secrets granted by {secret_grants(all_enabled)}, expected only Role {NAMESPACE}/{role_name}")
    role = next((o for o in all_enabled if o.get("kind") == "Role" and o["metadata"]["name"] == role_name), None)
    want_rules = [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret], "verbs": ["get"]}]
    if role is not None and role.get("rules") != want_rules:
        problems.append(f"Role {role_name} rules {role.get('rules')}, expected {want_rules}")
    bindings = [o for o in all_enabled if o.get("kind") == "RoleBinding"
                and o.get("roleRef", {}).get("name") == role_name]
    want_subjects = [{"kind": "ServiceAccount", "name": operator, "namespace": NAMESPACE}]
    if [(b["metadata"].get("namespace"), b.get("subjects")) for b in bindings] != [(NAMESPACE, want_subjects)]:
        problems.append(f"bindings of {role_name}: {[(b['metadata'].get('namespace'), b.get('subjects')) for b in bindings]}, "
                        f"expected one in {NAMESPACE} for {want_subjects}")
    deployment = next((o for o in all_enabled if o.get("kind") == "Deployment" and o["metadata"]["name"] == operator),
                      None)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"] if deployment else []
    for flag in (f"--hub-endpoint={hub['endpoint']}", f"--hub-token-secret={secret}",
                 f"--hub-token-namespaces={','.join(hub['tokenNamespaces'])}",
                 f"--hub-token-repos={','.join(hub['tokenRepos'])}"):
        if flag not in args:
            problems.append(f"the operator's args {args} lack {flag}")
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: none by default; with it, Role {role_name} (resourceNames [{secret}], get) bound to "
                  f"{operator}, and --hub-endpoint/--hub-token-secret/--hub-token-namespaces/--hub-token-repos")


def check_chart_crds(report: Report) -> None:
    sources = {p.name: p.read_bytes() for p in CRDS.glob("*.yaml")}
    copies = {p.name: p.read_bytes() for p in CHART_CRDS.glob("*.yaml")}
    if not sources:
        report.fail("chart CRDs", "crds/*.yaml is missing: generate the CRDs from the Rust types first")
        return
    problems = [f"crds/{n} has no copy in the chart" for n in sorted(set(sources) - set(copies))]
    problems += [f"charts/vramfit/crds-src/{n} has no source in crds/" for n in sorted(set(copies) - set(sources))]
    problems += [f"charts/vramfit/crds-src/{n} differs from crds/{n}"
                 for n in sorted(set(sources) & set(copies)) if sources[n] != copies[n]]
    if problems:
        report.fail("charts/vramfit/crds-src/ equals crds/*.yaml (run scripts/helm-check.sh --update)", problems)
    else:
        report.ok(f"charts/vramfit/crds-src/ equals crds/*.yaml ({', '.join(sorted(sources))})")


def check_deploy(report: Report, manifest: str, update: bool) -> None:
    expected = {
        "namespace.yaml": NAMESPACE_MANIFEST,
        "vramfit.yaml": GENERATED_HEADER + ("" if DEFAULTS_PINNED else UNPINNED_NOTE) + manifest.lstrip("\n"),
    }
    if update:
        DEPLOY.mkdir(exist_ok=True)
        for stale in DEPLOY.glob("*.yaml"):
            if stale.name not in expected:
                stale.unlink()
        for name, text in expected.items():
            (DEPLOY / name).write_text(text)
        report.ok(f"deploy/ rewritten ({', '.join(sorted(expected))})")
        return
    problems = []
    actual_names = {p.name for p in DEPLOY.glob("*.yaml")}
    for extra in sorted(actual_names - set(expected)):
        problems.append(f"deploy/{extra} is not rendered from the chart")
    for name, text in expected.items():
        path = DEPLOY / name
        if not path.exists():
            problems.append(f"deploy/{name} is missing")
            continue
        current = path.read_text()
        if current != text:
            diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(),
                                             f"deploy/{name}", f"rendered {name}", lineterm="", n=2))
            problems.append(f"deploy/{name} differs from the chart's render:")
            problems.extend(diff[:60] + (["…"] if len(diff) > 60 else []))
    if problems:
        report.fail("deploy/ matches the chart (run scripts/helm-check.sh --update)", problems)
    else:
        report.ok("deploy/ matches the chart's default render")


def check_kept_render(report: Report, path: Path, text: str, update: bool) -> None:
    """`path` holds `text` (a render kept for the tests); --update writes it."""
    name = path.relative_to(ROOT).as_posix()
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        report.ok(f"{name} rewritten")
        return
    current = path.read_text() if path.exists() else None
    if current == text:
        report.ok(f"{name} matches the chart's render")
        return
    if current is None:
        report.fail(f"{name} matches the chart (run scripts/helm-check.sh --update)", f"{name} is missing")
        return
    diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), name, "rendered",
                                     lineterm="", n=2))
    report.fail(f"{name} matches the chart (run scripts/helm-check.sh --update)",
                diff[:60] + (["…"] if len(diff) > 60 else []))


def check_watch_namespaces(report: Report, default: list[dict[str, Any]],
                           scoped: list[dict[str, Any]], watched: list[str]) -> None:
    """The namespace-scoped render is the default one but for the operator's RBAC and flag."""
    what = "namespace-scoped render (operator.watchNamespaces) differs only in the operator's RBAC and flag"
    operator = f"{RELEASE}-operator"

    def key(o: dict[str, Any]) -> tuple[str, str, str]:
        return (o.get("kind", ""), o["metadata"].get("namespace", ""), o["metadata"]["name"])

    before = {key(o): o for o in default}
    after = {key(o): o for o in scoped}
    problems = []
    added = sorted(set(after) - set(before))
    wanted = sorted((kind, ns, operator) for ns in watched for kind in ("Role", "RoleBinding"))
    if added != wanted:
        problems.append(f"objects added: {added}, expected a Role and a RoleBinding {operator} in each of {watched}")
    if set(before) - set(after):
        problems.append(f"objects gone: {sorted(set(before) - set(after))}")
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    expected_changes = [("ClusterRole", "", operator), ("Deployment", NAMESPACE, operator)]
    if changed != expected_changes:
        problems.append(f"objects changed: {changed}, expected only {expected_changes}")
    deployment = after.get(("Deployment", NAMESPACE, operator))
    if deployment is not None:
        old_args = before[("Deployment", NAMESPACE, operator)]["spec"]["template"]["spec"]["containers"][0]["args"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        flag = f"--watch-namespaces={','.join(watched)}"
        if [a for a in args if a != flag] != old_args or flag not in args:
            problems.append(f"Deployment args {args}: expected the default's plus {flag}")
    cluster_role = after.get(("ClusterRole", "", operator))
    if cluster_role is not None:
        writes = [r for r in cluster_role.get("rules", [])
                  if set(r.get("verbs", [])) - {"get", "list", "watch"}]
        if writes:
            problems.append(f"the ClusterRole grants more than reads: {writes}")
    if problems:
        report.fail(what, problems)
    else:
        report.ok(f"{what}: a Role and RoleBinding in each of {', '.join(watched)}, a read-only ClusterRole, "
                  "the same admission policies and aggregated roles")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite deploy/ from the chart")
    args = parser.parse_args()

    print(f"helm-check: {helm_sdkpy.get_version()} (helm-sdkpy {helm_sdkpy.__version__}), "
          f"Kubernetes floor {KUBE_FLOOR}")
    report = Report()
    check_chart_crds(report)
    all_enabled = load_values_file(ALL_ENABLED_VALUES)

    await check_lint(report, "default values", None)
    await check_lint(report, ALL_ENABLED_VALUES.relative_to(CHART).as_posix(), all_enabled)
    watch_namespaces = load_values_file(WATCH_NAMESPACES_VALUES)
    await check_lint(report, WATCH_NAMESPACES_VALUES.relative_to(CHART).as_posix(), watch_namespaces)
    model_cache = load_values_file(MODEL_CACHE_VALUES)
    await check_lint(report, MODEL_CACHE_VALUES.relative_to(CHART).as_posix(), model_cache)

    manifest = await check_render(report, "default values" + ("" if DEFAULTS_PINNED else " + images.allowTags"),
                                  None)
    all_enabled_manifest = await check_render(report, ALL_ENABLED_VALUES.relative_to(CHART).as_posix(), all_enabled)
    scoped = await check_render(report, WATCH_NAMESPACES_VALUES.relative_to(CHART).as_posix(), watch_namespaces)
    cached = await check_render(report, MODEL_CACHE_VALUES.relative_to(CHART).as_posix(), model_cache)
    if cached is not None:
        check_kept_render(report, MODEL_CACHE_RENDER, MODEL_CACHE_HEADER + cached.lstrip("\n"), args.update)
        check_cache_agent_guard(report, split_manifest(cached))
        check_model_volume_guard(report, split_manifest(cached),
                                 model_cache["modelCache"].get("hostPath", "/var/lib/vramfit/cache").rstrip("/"))
        check_model_pod_guard(report, split_manifest(cached))
    else:
        report.fail("install-tests/rendered/model-cache.yaml matches the chart", "the render failed")
    if manifest is not None:
        check_deploy(report, manifest, args.update)
        check_label_guard(report, split_manifest(manifest))
        check_pod_trust(report, split_manifest(manifest))
        try:
            opened = await render({"inferenceJobPodTrust": OPEN_POD_KEYS})
            check_pod_trust(report, split_manifest(opened), open_keys=True)
        except helm_sdkpy.HelmError as e:
            report.fail("InferenceJob pod trust policy with allowed keys", f"helm: {e}")
        if all_enabled_manifest is not None:
            check_hub_token(report, split_manifest(manifest), split_manifest(all_enabled_manifest),
                            all_enabled["operator"]["hub"])
            await check_network_policy(report, split_manifest(manifest), split_manifest(all_enabled_manifest),
                                       all_enabled["networkPolicy"]["metricsFrom"])
    else:
        report.fail("deploy/ matches the chart", "the default render failed")
    if scoped is not None:
        check_kept_render(report, WATCH_NAMESPACES_RENDER, WATCH_NAMESPACES_HEADER + scoped.lstrip("\n"), args.update)
        if manifest is not None:
            check_watch_namespaces(report, split_manifest(manifest), split_manifest(scoped),
                                   watch_namespaces["operator"]["watchNamespaces"])
    else:
        report.fail("install-tests/rendered/watch-namespaces.yaml matches the chart", "the render failed")

    await check_rejected(report, 'operator.replicas: "two"', {"operator": {"replicas": "two"}}, "replicas")
    await check_rejected(report, "an unknown key (operator.replicaCount)", {"operator": {"replicaCount": 2}},
                         "replicaCount")
    await check_rejected(report, "agent.logFormat: yaml", {"agent": {"logFormat": "yaml"}}, "logFormat")
    await check_rejected(report, "operator.watchNamespaces: [Team_A]",
                         {"operator": {"watchNamespaces": ["Team_A"]}}, "watchNamespaces")
    await check_rejected(report, "operator.watchNamespaces: [team-a, team-a]",
                         {"operator": {"watchNamespaces": ["team-a", "team-a"]}}, "watchNamespaces")
    await check_rejected(report, "agent.repairInterval: 0s", {"agent": {"repairInterval": "0s"}}, "repairInterval")
    await check_policy_refusals(report, "agentLabelGuard", "acceptUnguardedAgent", "the agent label guard")
    await check_unguarded_accepted(report)
    await check_policy_refusals(report, "inferenceJobPodTrust", "acceptUnguardedJobs", "the pod trust policy")
    await check_rejected(report, 'inferenceJobPodTrust.allowedLabelKeys: ["a b"]',
                         {"inferenceJobPodTrust": {"allowedLabelKeys": ["a b"]}}, "allowedLabelKeys")
    await check_unguarded_jobs_accepted(report)
    await check_image_pinning(report)
    await check_rejected(report, "networkPolicy.metricsFrom: [{namespace: monitoring}]",
                         {"networkPolicy": {"enabled": True, "metricsFrom": [{"namespace": "monitoring"}]}},
                         "metricsFrom")
    await check_rejected(report, "2 operators without leader election",
                         {"operator": {"leaderElection": {"enabled": False}}}, "leaderElection",
                         by_schema=False)

    print(f"helm-check: {report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    finally:
        shutil.rmtree(_HELM_HOME, ignore_errors=True)
