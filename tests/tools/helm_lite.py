#!/usr/bin/env python3
"""Render and check deploy/helm/stoker-watch where helm is not installed.

Neither Debian 12 nor PyPI packages helm, so this renders the subset of
Go templates the chart uses (and only that: anything else is an error,
so the chart cannot drift past what is checked): {{ .Values.a.b }},
.Release.Name/.Namespace, .Chart.X, `.` inside range, pipelines through
quote, toYaml and nindent N, if/else/end, range/end, and the {{- -}}
whitespace trims. Then it checks what `helm lint` and a cluster would
catch: every document parses as YAML, each .Values path exists in
values.yaml, selectors match the labels they select, mounts name
volumes, the ServiceMonitor's port is the Service's, and the agent
accepts the arguments the DaemonSet gives it (run with --stoker).

  helm_lite.py CHART [--set path=yaml]...          print the manifests
  helm_lite.py --check CHART [--stoker BIN]        the checks; prints "chart ok"
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

TOKEN = re.compile(r"{{(-?)\s*(.*?)\s*(-?)}}", re.S)


class TemplateError(Exception):
    pass


def tokenize(text):
    """Text and action tokens, with {{- and -}} trims applied."""
    out, pos = [], 0
    for m in TOKEN.finditer(text):
        lit = text[pos:m.start()]
        if m.group(1):
            lit = lit.rstrip(" \t\n")
        out.append(("text", lit))
        out.append(("act", m.group(2), bool(m.group(3))))
        pos = m.end()
    out.append(("text", text[pos:]))
    # A -}} trims the whitespace that starts the next text.
    for i, t in enumerate(out):
        if t[0] == "act" and t[2] and i + 1 < len(out):
            out[i + 1] = ("text", out[i + 1][1].lstrip(" \t\n"))
    return out


def parse(tokens, i=0, stop=("end",)):
    """A list of nodes up to a stop keyword; returns (nodes, index, keyword)."""
    nodes = []
    while i < len(tokens):
        t = tokens[i]
        if t[0] == "text":
            nodes.append(("text", t[1]))
            i += 1
            continue
        act = t[1]
        word = act.split()[0] if act else ""
        if word in stop:
            return nodes, i + 1, word
        if word == "if":
            body, i, kw = parse(tokens, i + 1, ("else", "end"))
            other = []
            if kw == "else":
                other, i, _ = parse(tokens, i, ("end",))
            nodes.append(("if", act[2:].strip(), body, other))
        elif word == "range":
            body, i, _ = parse(tokens, i + 1, ("end",))
            nodes.append(("range", act[5:].strip(), body))
        elif word in ("else", "end"):
            raise TemplateError("unexpected {{ %s }}" % word)
        else:
            nodes.append(("expr", act))
            i += 1
    if stop != ("end",) or nodes is None:
        pass
    return nodes, i, None


def lookup(ctx, path):
    if path == ".":
        return ctx["."]
    parts = path.lstrip(".").split(".")
    root = parts[0]
    if root not in ("Values", "Release", "Chart"):
        raise TemplateError("unsupported reference %s" % path)
    v = ctx[root]
    for p in parts[1:]:
        if not isinstance(v, dict) or p not in v:
            if root == "Values":
                raise TemplateError("%s is not in values.yaml" % path)
            raise TemplateError("unknown %s" % path)
        v = v[p]
    return v


def go_str(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def evaluate(expr, ctx):
    stages = [s.strip() for s in expr.split("|")]
    first = stages[0].split()
    if first[0] == "toYaml":
        v = lookup(ctx, first[1])
        v = yaml.safe_dump(v, default_flow_style=False, sort_keys=False).rstrip("\n")
    elif first[0] == "include":
        raise TemplateError("include is not supported here")
    elif len(first) == 1 and first[0].startswith("."):
        v = lookup(ctx, first[0])
    else:
        raise TemplateError("unsupported action {{ %s }}" % expr)
    for s in stages[1:]:
        w = s.split()
        if w[0] == "quote":
            v = json.dumps(go_str(v))
        elif w[0] == "nindent" and len(w) == 2:
            pad = " " * int(w[1])
            v = "\n" + "\n".join(pad + line if line else line for line in go_str(v).split("\n"))
        else:
            raise TemplateError("unsupported function %s" % s)
    return go_str(v) if not isinstance(v, str) else v


def truthy(v):
    return not (v is None or v is False or v == 0 or v == "" or v == [] or v == {})


def render_nodes(nodes, ctx):
    out = []
    for n in nodes:
        if n[0] == "text":
            out.append(n[1])
        elif n[0] == "expr":
            out.append(evaluate(n[1], ctx))
        elif n[0] == "if":
            cond = lookup(ctx, n[1]) if n[1].startswith(".") and " " not in n[1] else None
            if cond is None and (not n[1].startswith(".") or " " in n[1]):
                raise TemplateError("unsupported condition %s" % n[1])
            out.append(render_nodes(n[2] if truthy(cond) else n[3], ctx))
        elif n[0] == "range":
            for item in lookup(ctx, n[1]) or []:
                out.append(render_nodes(n[2], dict(ctx, **{".": item})))
    return "".join(out)


def load_values(chart, sets):
    with open(os.path.join(chart, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for s in sets:
        path, _, val = s.partition("=")
        d = values
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[k]
        if keys[-1] not in d:
            raise TemplateError("--set %s: not in values.yaml" % path)
        d[keys[-1]] = yaml.safe_load(val)
    return values


def render(chart, sets=(), release="stoker-watch", namespace="monitoring"):
    with open(os.path.join(chart, "Chart.yaml")) as f:
        meta = yaml.safe_load(f)
    ctx = {"Values": load_values(chart, sets), "Release": {"Name": release, "Namespace": namespace},
           "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"]}}
    docs = []
    tdir = os.path.join(chart, "templates")
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".yaml"):
            continue
        with open(os.path.join(tdir, name)) as f:
            nodes, _, kw = parse(tokenize(f.read()))
        if kw is not None:
            raise TemplateError("%s: unbalanced {{ end }}" % name)
        text = render_nodes(nodes, ctx)
        try:
            for d in yaml.safe_load_all(text):
                if d:
                    docs.append(d)
        except yaml.YAMLError as e:
            raise TemplateError("%s renders to invalid YAML: %s\n%s" % (name, e, text))
    return docs


def check(chart, stoker):
    with open(os.path.join(chart, "Chart.yaml")) as f:
        meta = yaml.safe_load(f)
    assert meta["apiVersion"] == "v2", "Chart.yaml: apiVersion must be v2"
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["version"]), "Chart.yaml: version is not SemVer"

    def by_kind(docs):
        return {d["kind"]: d for d in docs}

    k = by_kind(render(chart))
    assert set(k) == {"DaemonSet", "Service", "ServiceMonitor"}, sorted(k)
    ds, svc, sm = k["DaemonSet"], k["Service"], k["ServiceMonitor"]
    pod = ds["spec"]["template"]
    tl = pod["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= tl.items(), "DaemonSet selector"
    assert svc["spec"]["selector"].items() <= tl.items(), "Service selector"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), \
        "ServiceMonitor selector"
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert svc["spec"]["ports"][0]["targetPort"] in ports, "Service targetPort"
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"], "ServiceMonitor port"
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    for m in c["volumeMounts"]:
        assert m["name"] in vols, "mount %s has no volume" % m["name"]
    assert vols["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    args = c["args"]
    assert args[args.index("--pod-resources") + 1] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert pod["spec"]["hostPID"] is True
    assert "--pod-publications" in args
    assert c["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE"]
    # Switches.
    k = by_kind(render(chart, ["serviceMonitor.enabled=false", "podResources.enabled=false",
                               "webConfigSecret=stoker-web", "noJobLabels=true",
                               "noProcessSeries=true", "extraArgs=[--reap-after, '60']",
                               "podPublications=false",
                               "serviceMonitor.additionalLabels={release: prom}"]))
    assert "ServiceMonitor" not in k
    c2 = k["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]
    a2 = c2["args"]
    assert a2[a2.index("--pod-resources") + 1] == "none"
    for want in ("--no-job-labels", "--no-process-series", "--reap-after", "60", "--web-config-file"):
        assert want in a2, want
    vols2 = {v["name"] for v in k["DaemonSet"]["spec"]["template"]["spec"]["volumes"]}
    assert "pod-resources" not in vols2 and "web-config" in vols2
    assert "--pod-publications" not in a2 and "capabilities" not in c2["securityContext"]
    k = by_kind(render(chart, ["serviceMonitor.additionalLabels={release: prom}",
                               "serviceMonitor.scheme=https",
                               "serviceMonitor.tlsConfig={insecureSkipVerify: true}"]))
    assert k["ServiceMonitor"]["metadata"]["labels"]["release"] == "prom"
    assert k["ServiceMonitor"]["spec"]["endpoints"][0]["tlsConfig"] == {"insecureSkipVerify": True}
    # The agent takes the DaemonSet's arguments (paths it cannot have
    # here replaced: the listen address, the runtime directory).
    if stoker:
        with tempfile.TemporaryDirectory() as tmp:
            run = []
            for a in args[1:]:
                a = a.replace("$(NODE_NAME)", "node1")
                run.append(a)
            run[run.index("--listen") + 1] = "127.0.0.1:0"
            run[run.index("--runtime-dir") + 1] = tmp
            p = subprocess.run([stoker, "watch", "--nvml", "none", "--once", "--json", "-q"] + run,
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, "stoker watch %s: %s" % (" ".join(run), p.stderr)
            assert json.loads(p.stdout)["gpus"] == [], p.stdout[:200]
    print("chart ok")


def main(argv):
    stoker, sets, chart, do_check = None, [], None, False
    i = 0
    while i < len(argv):
        if argv[i] == "--check":
            do_check = True
        elif argv[i] == "--stoker":
            i += 1
            stoker = argv[i]
        elif argv[i] == "--set":
            i += 1
            sets.append(argv[i])
        else:
            chart = argv[i]
        i += 1
    if not chart:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        if do_check:
            check(chart, stoker)
        else:
            print("---\n".join(yaml.safe_dump(d, sort_keys=False) for d in render(chart, sets)))
    except (TemplateError, AssertionError, KeyError) as e:
        print("helm_lite: %s: %s" % (chart, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
