"""Command line of the GPU node lab: ``kubegpu-lab COMMAND`` where the ``kubegpu-lab`` wheel is
installed, ``PYTHONPATH=lab python -m kubegpu_lab COMMAND`` from a checkout.

    check                                            can this machine run the lab? (JSON, exit 1 if not)
    up [--profile demo] [--name NAME] [--nodes N]   boot (or repair) a lab, print its status
    up --platforms '[{"name": N, "profile": P}]'     boot nodes by node profile (see node-profiles)
    down [--name NAME | --all]                       power off, unmount, remove everything
    status [--name NAME] [--memory]                  nodes, API double, ports (JSON)
    reboot NODE [--name NAME]                        systemctl reboot inside NODE, wait for it
    ssh NODE [--name NAME] [-- COMMAND...]           root shell (or command) on NODE
    inventory | kubeconfig [--name NAME]             print the path of the generated file
    list                                             labs on this machine
    profiles                                         available lab profiles
    node-profiles                                    node profiles (``--platforms``, Molecule platforms)
    build [--rebuild]                                build the base image and package repository

The lab name defaults to $KUBEGPU_LAB_NAME, else the profile name.
"""
import argparse
import json
import os
import sys

from . import base, hostenv, packages, profiles
from .lab import Lab, all_labs, cache_root, lab_root
from .util import read_json
from .util import LabError


def _name(args):
    return args.name or os.environ.get("KUBEGPU_LAB_NAME") or getattr(args, "profile", None) or "demo"


def _print(obj):
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def prune_cache(current):
    """Remove base images and repositories that are neither current nor used by a lab."""
    import shutil
    used = {os.path.dirname(current["base"]), current["repo"]}
    for name in all_labs():
        st = read_json(os.path.join(lab_root(), name, "lab.json")) or {}
        if st.get("base"):
            used.add(os.path.dirname(st["base"]))
        if st.get("repo"):
            used.add(st["repo"])
    removed = []
    for kind in ("base", "repo"):
        top = os.path.join(cache_root(), kind)
        for entry in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            path = os.path.join(top, entry)
            if entry.startswith(".") or path in used or not os.path.isdir(path):
                continue
            shutil.rmtree(path)
            removed.append(path)
    return removed


def build_parser():
    p = argparse.ArgumentParser(prog="python -m kubegpu_lab", description="kubegpu.fleet GPU node lab",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="boot (or repair) a lab")
    up.add_argument("--profile", default="demo", help="profile name in lab/profiles or a path (default demo)")
    up.add_argument("--name", help="lab name (default: $KUBEGPU_LAB_NAME or the profile name)")
    up.add_argument("--nodes", type=int, help="node count (repeats the profile's nodes)")
    up.add_argument("--platforms", help="JSON list of {name, profile, node}: one node per entry by node "
                                        "profile (instead of --profile)")
    up.add_argument("--no-install", action="store_true", help="refuse instead of apt-get installing host tools")
    up.add_argument("--no-settle", action="store_true", help="return once sshd answers on every node")
    down = sub.add_parser("down", help="tear a lab down")
    down.add_argument("--name")
    down.add_argument("--all", action="store_true", help="every lab under the lab root")
    st = sub.add_parser("status", help="lab status as JSON")
    st.add_argument("--name")
    st.add_argument("--memory", action="store_true", help="measure each node's memory (PSS)")
    rb = sub.add_parser("reboot", help="reboot a node")
    rb.add_argument("node")
    rb.add_argument("--name")
    sh = sub.add_parser("ssh", help="ssh into a node")
    sh.add_argument("node")
    sh.add_argument("--name")
    sh.add_argument("cmd", nargs=argparse.REMAINDER)
    for what in ("inventory", "kubeconfig"):
        x = sub.add_parser(what, help="path of the lab's %s" % what)
        x.add_argument("--name")
    sub.add_parser("list", help="labs on this machine")
    sub.add_parser("profiles", help="available profiles")
    sub.add_parser("node-profiles", help="node profiles for --platforms and Molecule platforms")
    chk = sub.add_parser("check", help="what the lab needs of this machine (JSON; exit 1 when it cannot run)")
    chk.add_argument("--no-install", action="store_true", help="count missing Debian packages as problems")
    b = sub.add_parser("build", help="build the cached base image and package repository")
    b.add_argument("--rebuild", action="store_true")
    b.add_argument("--prune", action="store_true", help="remove cached images no lab under the lab root uses")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return dispatch(args)
    except LabError as exc:
        sys.stderr.write("kubegpu-lab: error: %s\n" % exc)
        return 1
    except OSError as exc:
        sys.stderr.write("kubegpu-lab: error: %s\n" % exc)
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("kubegpu-lab: interrupted\n")
        return 130


ROOT_COMMANDS = ("up", "down", "reboot", "ssh", "build", "status")


def dispatch(args):
    cmd = args.command
    if cmd in ROOT_COMMANDS:
        hostenv.require_root()
    if cmd == "up":
        lab = Lab(_name(args))
        profile = args.profile
        if args.platforms:
            try:
                platforms = json.loads(args.platforms)
            except ValueError as exc:
                raise LabError("--platforms is not JSON: %s" % exc)
            profile = profiles.compose(platforms, "--platforms")
        _print(lab.up(profile, node_count=args.nodes, install=not args.no_install,
                      settle=not args.no_settle))
        return 0
    if cmd == "down":
        names = all_labs() if args.all else [_name(args)]
        _print([Lab(n).down() for n in names])
        return 0
    if cmd == "status":
        _print(Lab(_name(args)).status(memory=args.memory))
        return 0
    if cmd == "reboot":
        hostenv.require_root()
        lab = Lab(_name(args))
        node = lab.node(args.node)
        _print({"node": node.name, "boot_id": node.reboot()})
        return 0
    if cmd == "ssh":
        command = list(args.cmd)
        if command[:1] == ["--name"] and len(command) >= 2:
            args.name, command = command[1], command[2:]
        if command[:1] == ["--"]:
            command = command[1:]
        lab = Lab(_name(args))
        node = lab.node(args.node)
        argv = node.ssh_cmd(command, raw=True)
        if sys.stdin.isatty() and not command:
            argv.insert(1, "-t")
        os.execvp(argv[0], argv)
    if cmd in ("inventory", "kubeconfig"):
        lab = Lab(_name(args))
        if not lab.exists():
            raise LabError("lab %s does not exist (kubegpu-lab up --name %s)" % (lab.name, lab.name))
        print(lab.inventory_path if cmd == "inventory" else lab.kubeconfig_path)
        return 0
    if cmd == "list":
        _print(all_labs())
        return 0
    if cmd == "check":
        report = hostenv.check_host(install=not args.no_install)
        _print(report)
        for problem in report["problems"]:
            sys.stderr.write("kubegpu-lab: cannot run here: %s\n" % problem)
        return 0 if report["ok"] else 1
    if cmd == "node-profiles":
        catalog = profiles.node_profiles()[0]
        _print(dict((name, "node %s of lab profile %s" % (node["name"], profiles.NODE_PROFILE_SOURCE))
                    for name, node in catalog.items()))
        return 0
    if cmd == "profiles":
        names = sorted(os.path.splitext(f)[0] for f in os.listdir(profiles.PROFILE_DIR) if f.endswith(".yml"))
        _print({n: profiles.load_profile(n)["description"] for n in names})
        return 0
    if cmd == "build":
        hostenv.ensure_host()
        out = {"base": base.ensure_base(cache_root(), rebuild=args.rebuild),
               "repo": packages.ensure_repo(cache_root(), rebuild=args.rebuild)}
        if args.prune:
            out["pruned"] = prune_cache(out)
        _print(out)
        return 0
    raise LabError("unknown command %s" % cmd)
