#!/usr/bin/env python3
"""check_pdl_contract.py - proves, from the sources, that every kernel of
kernels/cuda keeps the programmatic-dependent-launch contract of
kernels/cuda/launch.cuh (which this CPU-only check enforces where no GPU can):

  1. a kernel launched through cuda_launch calls cuda_pdl_enter() or
     cuda_pdl_wait() in its body, and no `return` comes before that call (a
     block leaving before its wait would let the next kernel read too soon);
  2. a kernel that calls cuda_pdl_wait() directly also calls cuda_pdl_trigger()
     after it;
  3. `<<<...>>>` launches appear only in the load-time files (probe.cu,
     repack.cu, and launch.cu's probe of the loaded code's arch at context
     creation), whose launches are plain and whose kernels do not use PDL.

It fails on a planted violation first (self-check), then on the real sources.
Usage: check_pdl_contract.py KERNELS_CUDA_DIR"""
import os
import re
import sys

PLAIN_FILES = {"probe.cu", "repack.cu", "launch.cu"}


def strip_comments(src):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", src, flags=re.S)


def kernels(src):
    """(name, body) of every __global__ function defined in src (comments
    removed first: a parenthesis in a comment is not a parameter list)."""
    src = strip_comments(src)
    out = []
    for m in re.finditer(r"__global__", src):
        head = src[m.end():m.end() + 400]
        names = [n for n in re.findall(r"(\w+)\s*\(", head) if n != "__launch_bounds__"]
        if not names:
            continue
        name = names[0]
        at = src.find(name + "(", m.end())
        depth, i = 0, src.index("(", at)
        while True:   # the parameter list
            depth += src[i] == "("
            depth -= src[i] == ")"
            i += 1
            if depth == 0:
                break
        rest = src[i:]
        if rest.lstrip().startswith(";"):
            continue   # a declaration
        b = src.index("{", i)
        depth, j = 0, b
        while True:
            depth += src[j] == "{"
            depth -= src[j] == "}"
            j += 1
            if depth == 0:
                break
        out.append((name, src[b:j]))
    return out


def problems(files):
    """files: {name: source}. Returns a list of violations."""
    bad = []
    for fname, src in sorted(files.items()):
        src = strip_comments(src)
        launched = set(re.findall(r"cuda_launch\(\s*(\w+)", src))
        if fname not in PLAIN_FILES and re.search(r"<<<", src):
            bad.append("%s: a <<<>>> launch outside the load-time files" % fname)
        for name, body in kernels(src):
            code = body
            if fname in PLAIN_FILES:
                if "cuda_pdl_" in code:
                    bad.append("%s: %s is launched plain but uses PDL" % (fname, name))
                continue
            if name not in launched:
                continue
            w = min([p for p in (code.find("cuda_pdl_enter"), code.find("cuda_pdl_wait")) if p >= 0],
                    default=-1)
            if w < 0:
                bad.append("%s: %s never waits (cuda_pdl_enter / cuda_pdl_wait)" % (fname, name))
                continue
            r = re.search(r"\breturn\b", code)
            if r and r.start() < w:
                bad.append("%s: %s may return before its wait" % (fname, name))
            if "cuda_pdl_wait" in code and "cuda_pdl_enter" not in code:
                t = code.find("cuda_pdl_trigger")
                if t < code.find("cuda_pdl_wait"):
                    bad.append("%s: %s triggers before (or without) its wait" % (fname, name))
    return bad


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    planted = {"x.cu": "static __global__ void k_bad(int *p)\n{\n    if (!p)\n        return;\n"
                       "    cuda_pdl_enter();\n    p[0] = 1;\n}\nint f(){ return cuda_launch(k_bad, 1, 1, 0, 0, 0); }\n"}
    if not problems(planted):
        print("FAIL: the self-check's planted early return was not found")
        return 1
    good = {"y.cu": "static __global__ void __launch_bounds__(32, 4)   /* 4 per SM (128 regs) */\n"
                    "    k_ok(int *p)\n{\n    cuda_pdl_enter();\n    if (!p)\n        return;\n}\n"
                    "int g(){ return cuda_launch(k_ok, 1, 1, 0, 0, 0); }\n"}
    if problems(good) or [n for n, _ in kernels(good["y.cu"])] != ["k_ok"]:
        print("FAIL: the self-check's good kernel (a parenthesis in a comment) was misread")
        return 1
    d = sys.argv[1]
    files = {f: open(os.path.join(d, f)).read() for f in os.listdir(d) if f.endswith(".cu")}
    n = sum(len(kernels(s)) for s in files.values())
    bad = problems(files)
    for b in bad:
        print("FAIL:", b)
    if bad:
        return 1
    print("PASS: %d kernels in %d files keep the PDL contract" % (n, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
