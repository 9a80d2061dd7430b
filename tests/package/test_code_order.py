"""deploy/link-ordered, the linker of packaged builds (docs/drive.md, "The code pages").

A small C program of three functions is linked through it, as rustc links oedd (the
output named `oedd`), for the host with cc and for aarch64 and armv7 with the cross gcc
(deploy/package.sh installs it; those cases are skipped without it). The order file names
the last function of the source first, and the linked binary must hold the functions in
the file's order; `CODE_ORDER=off` must leave the source order. The names the order file
holds are those of `deploy/link-ordered --names`: Rust's symbols without their build's
hash, which is what lets one list serve every build and target.
"""

import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
LINKER = ROOT / "deploy" / "link-ordered"

SOURCE = """
int first(int x) { return x * 3 + 1; }
int second(int x) { return first(x) ^ 0x55; }
int third(int x) { return second(x) - first(x); }
int main(int argc, char **argv) { (void)argv; return third(argc) & 1; }
"""

TOOLCHAINS = [
    ("cc", "nm"),
    ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-nm"),
    ("arm-linux-gnueabihf-gcc", "arm-linux-gnueabihf-nm"),
]


def addresses(nm, binary):
    out = subprocess.run([nm, "--defined-only", str(binary)], capture_output=True,
                         text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[2] in ("first", "second", "third"):
            found[f[2]] = int(f[0], 16)
    return found


@pytest.mark.parametrize("cc,nm", TOOLCHAINS, ids=[t[0] for t in TOOLCHAINS])
def test_the_listed_functions_come_first_in_the_listed_order(tmp_path, cc, nm):
    if shutil.which(cc) is None or shutil.which(nm) is None:
        pytest.skip(f"{cc} is not installed here (deploy/cross/setup.sh installs it)")
    obj = tmp_path / "prog.o"
    (tmp_path / "prog.c").write_text(SOURCE)
    subprocess.run([cc, "-O1", "-ffunction-sections", "-c", "-o", str(obj),
                    str(tmp_path / "prog.c")], check=True)
    order = tmp_path / "order.txt.gz"
    with gzip.open(order, "wt") as f:
        f.write("third\nfirst\nnot_in_this_program\n")
    env = dict(os.environ, CODE_ORDER_CC=cc, CODE_ORDER_FILE=str(order))

    def link(name, **extra):
        out = tmp_path / name / "oedd"
        out.parent.mkdir()
        # As rustc calls it: the C driver's arguments, stripping asked for.
        subprocess.run([str(LINKER), str(obj), "-o", str(out), "-Wl,--strip-debug"],
                       env=dict(env, **extra), check=True)
        return out

    ordered = addresses(nm, link("ordered"))
    assert set(ordered) == {"first", "second", "third"}, ordered
    assert ordered["third"] < ordered["first"] < ordered["second"], ordered
    assert not list((tmp_path / "ordered").glob("*.plain")), "the first link is removed"
    assert not list((tmp_path / "ordered").glob("*.code-order")), "the symbol list is removed"

    plain = addresses(nm, link("plain", CODE_ORDER="off"))
    assert plain["first"] < plain["second"] < plain["third"], plain

    link("kept", CODE_ORDER="keep")
    kept = addresses(nm, tmp_path / "kept" / "oedd.plain")
    assert kept["first"] < kept["second"] < kept["third"], kept


def test_names_lose_the_build_hash_and_nothing_else():
    names = [
        "_ZN4axum7routing10url_params17insert_url_params17h77a2b0709a9cd777E",
        "_ZN5bytes5bytes11static_drop17h86636e7a0404eebeE.llvm.16917239761652502408",
        "_RNvCsfLfy6EI15iL_7___rustc12___rust_alloc",
        "_ZN7rocksdb2DB4OpenERKNS_7OptionsE",
        "0000000000569800 T _start",
    ]
    out = subprocess.run([str(LINKER), "--names"], input="\n".join(names) + "\n",
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [
        "_ZN4axum7routing10url_params17insert_url_paramsE",
        "_ZN5bytes5bytes11static_dropE",
        "_RNvCs_7___rustc12___rust_alloc",
        "_ZN7rocksdb2DB4OpenERKNS_7OptionsE",
        "_start",
    ]


def test_the_order_file_is_a_list_of_such_names():
    with gzip.open(ROOT / "deploy" / "code-order.txt.gz", "rt") as f:
        names = f.read().split()
    assert len(names) > 1000, "the list names the functions a drive runs"
    assert len(set(names)) == len(names), "each name once"
    hashed = [n for n in names if re.search(r"17h[0-9a-f]{16}E|\.llvm\.[0-9]+$", n)]
    assert not hashed, f"names with a build's hash: {hashed[:5]}"
    assert "main" in names, "a drive runs main"
