"""Builds a one-package index (PEP 503 simple layout) with a minimal wheel, for `pip download`."""
import base64
import hashlib
import os
import sys
import zipfile

root = sys.argv[1]
os.makedirs(f"{root}/simple/demo-pkg", exist_ok=True)
os.makedirs(f"{root}/packages", exist_ok=True)
name = "demo_pkg-1.0-py3-none-any.whl"
files = {
    "demo_pkg/__init__.py": b"VALUE = 1\n",
    "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
    "demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: egress-suite\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(data)}")
record.append("demo_pkg-1.0.dist-info/RECORD,,")
files["demo_pkg-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{root}/packages/{name}", "w") as z:
    for path, data in files.items():
        z.writestr(path, data)
sha = hashlib.sha256(open(f"{root}/packages/{name}", "rb").read()).hexdigest()
with open(f"{root}/simple/demo-pkg/index.html", "w") as f:
    f.write(f'<html><body><a href="../../packages/{name}#sha256={sha}">{name}</a></body></html>\n')
with open(f"{root}/simple/index.html", "w") as f:
    f.write('<html><body><a href="demo-pkg/">demo-pkg</a></body></html>\n')
print(name)
