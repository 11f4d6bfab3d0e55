"""Build a gpumem wheel for the platform of a gpumem binary: the gpumem command (built
beforehand with go build) as the wheel's script, the gpumem package (a
thin API over the command's JSON) and the recording helpers as top-level
modules, the way ruff and uv ship their binaries. Standard library only.

usage: python3 python/build_wheel.py BINARY OUTDIR [--version V]
Prints the wheel's path. The platform tag is the binary's (see
platform_tag), so scripts/build_wheels.sh can build each Linux wheel on
one machine with a cross compiler."""
import argparse, base64, hashlib, io, os, re, stat, sys, sysconfig, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ["gpumem_spool.py", "gpumem_hooks.py", "gpumem_trace_writer.py", "gpumem_record.py"]


ELF_MACHINES = {3: "i686", 62: "x86_64", 40: "armv7l", 183: "aarch64", 21: "ppc64le", 22: "s390x"}


def platform_tag(binary):
    """The wheel's platform tag, read from the binary itself, as auditwheel
    does: a Linux ELF binary gets manylinux_X_Y_ARCH, where ARCH is the ELF
    header's machine and X.Y the newest GLIBC_ symbol version it needs (so
    a binary cross-built for arm64 is tagged for arm64, and the tag does not
    depend on the build machine's glibc). Anything else: this platform's."""
    with open(binary, "rb") as f:
        head = f.read(64)
        if head[:4] == b"\x7fELF" and head[4] == 2 and head[5] == 1:  # 64-bit, little-endian
            machine = int.from_bytes(head[18:20], "little")
            if machine not in ELF_MACHINES:
                sys.exit(f"build_wheel.py: {binary}: unknown ELF machine {machine}")
            f.seek(0)
            needs = {tuple(map(int, m)) for m in re.findall(rb"GLIBC_(\d+)\.(\d+)", f.read())}
            major, minor = max(needs) if needs else (2, 17)
            return f"manylinux_{major}_{minor}_{ELF_MACHINES[machine]}"
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("outdir")
    ap.add_argument("--version", default="0.0.0.dev0")
    a = ap.parse_args()
    name, ver, tag = "gpumem", a.version, f"py3-none-{platform_tag(a.binary)}"
    dist, data = f"{name}-{ver}.dist-info", f"{name}-{ver}.data"
    files = []  # (arcname, bytes, executable)
    for f in sorted(os.listdir(os.path.join(HERE, "gpumem"))):
        if f.endswith(".py"):
            files.append((f"gpumem/{f}", open(os.path.join(HERE, "gpumem", f), "rb").read(), False))
    for m in MODULES:  # links to internal/record's copies are read through
        files.append((m, open(os.path.join(HERE, m), "rb").read(), False))
    exe = "gpumem"
    files.append((f"{data}/scripts/{exe}", open(a.binary, "rb").read(), True))
    readme = open(os.path.join(HERE, "..", "README.md"), encoding="utf-8").read()
    meta = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n"
            "Summary: GPU memory profiler: replay PyTorch allocator traces, explain out-of-memory errors, "
            "estimate a job's memory before it runs\nLicense: MIT\nRequires-Python: >=3.8\n"
            "Description-Content-Type: text/markdown\n\n" + readme)
    files.append((f"{dist}/METADATA", meta.encode(), False))
    files.append((f"{dist}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: gpumem build_wheel.py\n"
                                    f"Root-Is-Purelib: false\nTag: {tag}\n").encode(), False))
    files.append((f"{dist}/LICENSE", open(os.path.join(HERE, "..", "LICENSE"), "rb").read(), False))
    record = io.StringIO()
    for arc, body, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.write(f"{arc},sha256={digest},{len(body)}\n")
    record.write(f"{dist}/RECORD,,\n")
    files.append((f"{dist}/RECORD", record.getvalue().encode(), False))
    os.makedirs(a.outdir, exist_ok=True)
    out = os.path.join(a.outdir, f"{name}-{ver}-{tag}.whl")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, body, executable in files:
            zi = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, body)
    print(out)


main()
