"""Build the gpumem wheel for this platform: the gpumem command (built
beforehand with go build) as the wheel's script, the gpumem package (a
thin API over the command's JSON) and the recording helpers as top-level
modules, the way ruff and uv ship their binaries. Standard library only.

usage: python3 python/build_wheel.py BINARY OUTDIR [--version V]
Prints the wheel's path. The platform tag is the build machine's: a
manylinux tag of its glibc (the binary needs at least that one), or the
platform's own elsewhere."""
import argparse, base64, hashlib, io, os, platform, stat, sys, sysconfig, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ["gpumem_spool.py", "gpumem_hooks.py", "gpumem_trace_writer.py", "gpumem_record.py"]


def platform_tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    libc, ver = platform.libc_ver()
    if plat.startswith("linux_") and libc == "glibc" and ver:
        major, minor = ver.split(".")[:2]
        return f"manylinux_{major}_{minor}_{plat[len('linux_'):]}"
    return plat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("outdir")
    ap.add_argument("--version", default="0.0.0.dev0")
    a = ap.parse_args()
    name, ver, tag = "gpumem", a.version, f"py3-none-{platform_tag()}"
    dist, data = f"{name}-{ver}.dist-info", f"{name}-{ver}.data"
    files = []  # (arcname, bytes, executable)
    for f in sorted(os.listdir(os.path.join(HERE, "gpumem"))):
        if f.endswith(".py"):
            files.append((f"gpumem/{f}", open(os.path.join(HERE, "gpumem", f), "rb").read(), False))
    for m in MODULES:  # links to internal/record's copies are read through
        files.append((m, open(os.path.join(HERE, m), "rb").read(), False))
    exe = "gpumem.exe" if sys.platform == "win32" else "gpumem"
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
