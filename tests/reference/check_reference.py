#!/usr/bin/env python3
"""check_reference.py - proves that cmpserve computes the same logits as the
Hugging Face transformers implementation of Qwen3.5 (Qwen3_5ForCausalLM).

It builds a small random Qwen3_5ForCausalLM (8 layers: 6 Gated DeltaNet + 2
gated attention, GDN value heads != key heads so the V-head reorder matters,
random norm weights, A_log and dt_bias), exports it to GGUF with the
conversion transforms of model.md section 4 (norm weights stored as 1 + w
except the GDN gated norm, ssm_a = -exp(A_log), conv1d squeezed, value heads
reordered from grouped to tiled), in F32 and in Q8_0, with a small GGUF writer
of its own (numpy only). Then it runs `cmpserve logits` (CPU backend, and the
CUDA backend via --device 0 when the binary has one) on a 48-token prompt plus
16 greedy decode steps, runs the HF model (fp32, CPU) over the same ids, and
compares, per position (details in judge()):

  F32 files:  max|ours - hf| / max|hf| <= 1e-4 at every position
  Q8_0 files: against HF f32: mean KL(hf || ours) <= 1e-3 and top-1 agreement
              >= min(99%, the top-1 agreement of HF itself run with the
              Q8_0-rounded weights, minus 3 positions (8 on int8 paths));
              against HF run with the Q8_0-rounded weights: the CPU fp32 path
              exact (<= 1e-4), the int8 paths (--int8, CUDA) mean KL <= 1e-3.
  (A flat random model has ~5% of positions within quantization noise of a
  tie, so a fixed 99% top-1 against HF f32 is out of reach for any engine.)

A negative control exports the F32 model WITHOUT the V-head reorder and
requires the F32 check to fail, so a comparison that cannot fail is caught.
Prints a table; exits 0 when every row passes, 1 otherwise, 2 on a setup error.

usage: check_reference.py --cmpserve PATH/TO/cmpserve [--workdir DIR]
           [--cuda auto|on|off] [--seed N] [--threads N]
(set LD_LIBRARY_PATH for the binary when it needs it; the script inherits it.)
Needs: numpy, torch, transformers with Qwen3_5 (5.x; 4.57+ where present).
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")       # no hub kernels: the pure torch path
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

N_PROMPT = 48
N_DECODE = 16
F32_TOL = 1e-4
Q8_TOP1 = 0.99
Q8_KL = 1e-3
Q8_TOP1_SLACK = 3.0 / (N_PROMPT + N_DECODE)   # three positions (exact-weight paths)
Q8_TOP1_SLACK_INT8 = 8.0 / (N_PROMPT + N_DECODE)  # int8 activations add as much noise again

# The test model (model.md shapes, scaled down; head dims as in the real models).
CFG = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
           num_attention_heads=4, num_key_value_heads=2, head_dim=256,
           linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
           linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
           max_position_embeddings=4096, tie_word_embeddings=False)
ROPE = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10], "mrope_interleaved": True}


# ---------------------------------------------------------------- HF model

def build_hf_model(seed):
    import torch
    # The reference is the pure-torch path: block the optional GPU kernel packages
    # (flash-linear-attention, causal-conv1d) that transformers would pick up at import.
    for mod in ("fla", "causal_conv1d", "kernels"):
        sys.modules.setdefault(mod, None)
    try:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    except ImportError as e:
        raise SystemExit(f"check_reference: this transformers has no Qwen3_5 ({e})")
    cfg = dict(CFG)
    n = cfg["num_hidden_layers"]
    cfg["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                          for i in range(n)]
    try:
        config = Qwen3_5TextConfig(rope_parameters=dict(ROPE), **cfg)
    except TypeError:  # older releases: rope_theta / partial_rotary_factor as fields
        config = Qwen3_5TextConfig(rope_theta=ROPE["rope_theta"],
                                   partial_rotary_factor=ROPE["partial_rotary_factor"], **cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config).float().eval()
    randomize(model, seed)
    rot = model.model.rotary_emb.inv_freq
    want = 1.0 / (ROPE["rope_theta"] ** (np.arange(0, 64, 2) / 64.0))
    if rot.numel() != 32 or not np.allclose(rot.double().numpy(), want, rtol=1e-5):
        raise SystemExit("check_reference: this transformers did not take the RoPE settings "
                         "(64 rotated dims, theta 1e7); adapt build_hf_model to its config")
    if [l.block_type if hasattr(l, "block_type") else "?" for l in model.model.layers][:4] != \
            ["linear_attention"] * 3 + ["full_attention"]:
        raise SystemExit("check_reference: unexpected layer kinds in the HF model")
    return model, config


def randomize(model, seed):
    """Weights with realistic activation statistics and non-trivial norms."""
    import torch
    g = torch.Generator().manual_seed(seed + 1)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=g) * std + mean

    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("embed_tokens.weight"):
                p.copy_(normal(shape, 1.0))
            elif name.endswith("linear_attn.norm.weight"):       # plain RMSNorm weight
                p.copy_(normal(shape, 0.1, 1.0))
            elif name.endswith("norm.weight"):                   # (1 + w) RMSNorms
                p.copy_(normal(shape, 0.1))
            elif name.endswith("A_log"):
                p.copy_(torch.log(1.0 + 15.0 * torch.rand(shape, generator=g)))
            elif name.endswith("dt_bias"):
                dt = torch.exp(np.log(1e-3) + (np.log(1e-1) - np.log(1e-3))
                               * torch.rand(shape, generator=g))
                p.copy_(torch.log(torch.expm1(dt)))
            elif name.endswith("conv1d.weight"):
                p.copy_(normal(shape, 0.3))
            elif p.dim() == 2:
                n_in = shape[1]
                scale = 0.5 if name.split(".")[-2] in ("out_proj", "o_proj", "down_proj") else 1.0
                p.copy_(normal(shape, scale / np.sqrt(n_in)))
            else:
                raise SystemExit(f"check_reference: unexpected parameter {name} {tuple(shape)}")


def dequantized_copy(model):
    """The model with every weight the Q8_0 file quantizes replaced by its
    Q8_0 round trip: what an exact engine computes from the Q8_0 file. (Blocks
    run along the input dim; the V-head reorder moves whole blocks, so
    quantizing before or after it is the same.)"""
    import copy
    import torch
    mq = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in mq.named_parameters():
            if p.dim() == 2 and p.shape[-1] % 32 == 0:
                w = p.detach().float().numpy()
                blocks = np.frombuffer(quantize_q8_0(w), np.uint8).reshape(-1, 34)
                d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
                q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
                p.copy_(torch.from_numpy((q * d).reshape(w.shape)))
    return mq


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    return out.logits[0].double().numpy()


# ---------------------------------------------------------------- export

def v_head_perm(n_k, n_v):
    """GGUF (tiled) value head h' takes HF (grouped) head (h' % Gk) * r + h' // Gk."""
    r = n_v // n_k
    return np.array([(h % n_k) * r + h // n_k for h in range(n_v)])


def export_tensors(model, config, reorder=True):
    """HF state dict -> [(gguf name, float32 array in HF [out, in] layout)]."""
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    E, n_k, n_v = config.hidden_size, config.linear_num_key_heads, config.linear_num_value_heads
    dk, dv = config.linear_key_head_dim, config.linear_value_head_dim
    perm = v_head_perm(n_k, n_v) if reorder else np.arange(n_v)
    key_dim = n_k * dk

    def rows_by_head(w, d):           # reorder blocks of d rows per value head
        return w.reshape(n_v, d, *w.shape[1:])[perm].reshape(w.shape)

    out = [("token_embd.weight", sd["model.embed_tokens.weight"]),
           ("output_norm.weight", 1.0 + sd["model.norm.weight"])]
    if not config.tie_word_embeddings:
        out.append(("output.weight", sd["lm_head.weight"]))
    for i, kind in enumerate(config.layer_types):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out.append((b + "attn_norm.weight", 1.0 + sd[p + "input_layernorm.weight"]))
        out.append((b + "post_attention_norm.weight", 1.0 + sd[p + "post_attention_layernorm.weight"]))
        if kind == "linear_attention":
            a = p + "linear_attn."
            qkv = sd[a + "in_proj_qkv.weight"].copy()
            qkv[2 * key_dim:] = rows_by_head(qkv[2 * key_dim:], dv)
            conv = sd[a + "conv1d.weight"][:, 0, :].copy()            # (C, 1, K) -> (C, K)
            conv[2 * key_dim:] = rows_by_head(conv[2 * key_dim:], dv)
            o = sd[a + "out_proj.weight"]                              # [E, Hv*dv]
            o = o.reshape(E, n_v, dv)[:, perm, :].reshape(E, n_v * dv)
            out += [(b + "attn_qkv.weight", qkv),
                    (b + "attn_gate.weight", rows_by_head(sd[a + "in_proj_z.weight"], dv)),
                    (b + "ssm_beta.weight", sd[a + "in_proj_b.weight"][perm]),
                    (b + "ssm_alpha.weight", sd[a + "in_proj_a.weight"][perm]),
                    (b + "ssm_conv1d.weight", conv),
                    (b + "ssm_dt.bias", sd[a + "dt_bias"][perm]),
                    (b + "ssm_a", -np.exp(sd[a + "A_log"][perm])),
                    (b + "ssm_norm.weight", sd[a + "norm.weight"]),
                    (b + "ssm_out.weight", o)]
        else:
            a = p + "self_attn."
            out += [(b + "attn_q.weight", sd[a + "q_proj.weight"]),
                    (b + "attn_k.weight", sd[a + "k_proj.weight"]),
                    (b + "attn_v.weight", sd[a + "v_proj.weight"]),
                    (b + "attn_q_norm.weight", 1.0 + sd[a + "q_norm.weight"]),
                    (b + "attn_k_norm.weight", 1.0 + sd[a + "k_norm.weight"]),
                    (b + "attn_output.weight", sd[a + "o_proj.weight"])]
        out += [(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"]),
                (b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"]),
                (b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])]
    return [(n, np.ascontiguousarray(t, dtype=np.float32)) for n, t in out]


# ---------------------------------------------------------------- GGUF writer

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR = 4, 5, 6, 7, 8, 9
T_F32, T_F16, T_Q8_0 = 0, 1, 8


def quantize_q8_0(x):
    """llama.cpp's quantize_row_q8_0_ref: d = amax/127 (stored fp16), q =
    roundf(x / d) (half away from zero), blocks of fp16 d + 32 int8."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127.0)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), 0).astype(np.float32)
    v = (blocks * inv[:, None]).astype(np.float32).astype(np.float64)
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def gguf_type_for(name, t, q8):
    """llama.cpp's rules: 1-D, *_norm.weight, ssm_a, ssm_dt.bias and
    ssm_conv1d.weight stay F32; other matrices Q8_0 (F16 if a row is not a
    multiple of 32)."""
    if not q8 or t.ndim == 1 or name.endswith(("_norm.weight", "ssm_conv1d.weight")):
        return T_F32
    return T_Q8_0 if t.shape[-1] % 32 == 0 else T_F16


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class GGUFWriter:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def add_tensor(self, name, arr, ttype):
        self.tensors.append((name, arr, ttype))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, v):
        if vtype == GGUF_STR:
            return self._str(v)
        if vtype == GGUF_ARR:
            etype, items = v
            body = b"".join(self._value(etype, x) for x in items)
            return struct.pack("<IQ", etype, len(items)) + body
        fmt = {GGUF_U32: "<I", GGUF_I32: "<i", GGUF_F32: "<f", GGUF_BOOL: "<?"}[vtype]
        return struct.pack(fmt, v)

    def write(self, path, align=32):
        blobs, infos, off = [], [], 0
        for name, arr, ttype in self.tensors:
            if ttype == T_Q8_0:
                data = quantize_q8_0(arr)
            elif ttype == T_F16:
                data = arr.astype(np.float16).tobytes()
            else:
                data = arr.astype(np.float32).tobytes()
            ne = list(reversed(arr.shape))              # ggml order: ne0 contiguous
            infos.append(self._str(name) + struct.pack("<I", len(ne))
                         + b"".join(struct.pack("<Q", n) for n in ne)
                         + struct.pack("<IQ", ttype, off))
            pad = (-len(data)) % align
            blobs.append(data + b"\0" * pad)
            off += len(data) + pad
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for key, vtype, v in self.kv:
            head += self._str(key) + struct.pack("<I", vtype) + self._value(vtype, v)
        head += b"".join(infos)
        head += b"\0" * ((-len(head)) % align)
        with open(path, "wb") as f:
            f.write(head)
            for b in blobs:
                f.write(b)


def write_gguf(path, config, tensors, q8):
    w = GGUFWriter()
    E, V = config.hidden_size, config.vocab_size
    w.add("general.architecture", GGUF_STR, "qwen35")
    w.add("general.type", GGUF_STR, "model")
    w.add("general.name", GGUF_STR, "cmpserve reference check")
    w.add("general.file_type", GGUF_U32, 7 if q8 else 0)
    w.add("general.quantization_version", GGUF_U32, 2)
    a = "qwen35."
    for key, val in (("block_count", config.num_hidden_layers), ("context_length", 4096),
                     ("embedding_length", E), ("feed_forward_length", config.intermediate_size),
                     ("attention.head_count", config.num_attention_heads),
                     ("attention.head_count_kv", config.num_key_value_heads),
                     ("attention.key_length", config.head_dim),
                     ("attention.value_length", config.head_dim),
                     ("rope.dimension_count", int(config.head_dim * ROPE["partial_rotary_factor"])),
                     ("ssm.conv_kernel", config.linear_conv_kernel_dim),
                     ("ssm.state_size", config.linear_key_head_dim),
                     ("ssm.group_count", config.linear_num_key_heads),
                     ("ssm.time_step_rank", config.linear_num_value_heads),
                     ("ssm.inner_size", config.linear_value_head_dim * config.linear_num_value_heads),
                     ("full_attention_interval", 4)):
        w.add(a + key, GGUF_U32, val)
    w.add(a + "rope.freq_base", GGUF_F32, ROPE["rope_theta"])
    w.add(a + "attention.layer_norm_rms_epsilon", GGUF_F32, config.rms_norm_eps)
    w.add(a + "rope.dimension_sections", GGUF_ARR, (GGUF_I32, [11, 11, 10, 0]))
    b2u = bytes_to_unicode()
    toks = [b2u[i] for i in range(256)] + [f"[PAD{i}]" for i in range(256, V)]
    w.add("tokenizer.ggml.model", GGUF_STR, "gpt2")
    w.add("tokenizer.ggml.pre", GGUF_STR, "qwen35")
    w.add("tokenizer.ggml.tokens", GGUF_ARR, (GGUF_STR, toks))
    w.add("tokenizer.ggml.token_type", GGUF_ARR, (GGUF_I32, [1] * 256 + [5] * (V - 256)))
    w.add("tokenizer.ggml.merges", GGUF_ARR, (GGUF_STR, []))
    w.add("tokenizer.ggml.eos_token_id", GGUF_U32, V - 1)
    w.add("tokenizer.ggml.padding_token_id", GGUF_U32, V - 2)
    for name, t in tensors:
        w.add_tensor(name, t, gguf_type_for(name, t, q8))
    w.write(path)


# ---------------------------------------------------------------- engine

def read_logits_file(path):
    data = open(path, "rb").read()
    if data[:4] != b"CSLG":
        raise ValueError(f"{path}: not a cmpserve logits file")
    ver, n_pos, n_vocab, n_prompt, n_decode = struct.unpack_from("<5I", data, 4)
    off = 24
    ids = np.frombuffer(data, np.int32, n_pos, off).copy()
    logits = np.frombuffer(data, np.float32, n_pos * n_vocab, off + 8 * n_pos)
    return ids, logits.reshape(n_pos, n_vocab).astype(np.float64)


def run_engine(binary, model, prompt, device, out, threads, int8=False):
    args = [binary, "logits", "--model", model, "--tokens", ",".join(map(str, prompt)),
            "--decode", str(N_DECODE), "--out", out, "--device", device]
    if threads:
        args += ["--threads", str(threads)]
    if int8:
        args.append("--int8")
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
    return read_logits_file(out), None


# ---------------------------------------------------------------- comparison

def log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def metrics(ours, ref):
    rel = np.abs(ours - ref).max(axis=1) / np.abs(ref).max(axis=1)
    top1 = float((ours.argmax(axis=1) == ref.argmax(axis=1)).mean())
    lp, lq = log_softmax(ref), log_softmax(ours)
    kl = float((np.exp(lp) * (lp - lq)).sum(axis=1).mean())
    return {"max_rel": float(rel.max()), "top1": top1, "kl": kl}


def judge(kind, exact_path, ours, ref_f32, ref_q8):
    """(passed, metrics vs HF f32, metrics vs HF with Q8_0-rounded weights, note).

    f32 files: max|d|/max|l| <= F32_TOL at every position against HF f32.
    q8_0 files: against HF f32, mean KL <= Q8_KL and top-1 >= min(Q8_TOP1,
    baseline - Q8_TOP1_SLACK), where baseline is the top-1 agreement of HF run
    with the Q8_0-rounded weights itself: on a random model ~5% of positions
    are near-ties that quantization alone flips, so 99% is out of reach for
    any engine (slack: 3 positions, 8 on int8-activation paths). And against HF with the Q8_0-rounded weights: the fp32-matmul
    CPU path must be exact (max|d|/max|l| <= F32_TOL); int8-activation paths
    (--int8, CUDA) mean KL <= Q8_KL."""
    m32 = metrics(ours, ref_f32)
    if kind != "q8_0":
        return m32["max_rel"] <= F32_TOL, m32, None, ""
    mq = metrics(ours, ref_q8)
    base = metrics(ref_q8, ref_f32)["top1"]
    need = min(Q8_TOP1, base - (Q8_TOP1_SLACK if exact_path else Q8_TOP1_SLACK_INT8))
    ok = m32["kl"] <= Q8_KL and m32["top1"] >= need
    ok = ok and (mq["max_rel"] <= F32_TOL if exact_path else mq["kl"] <= Q8_KL)
    return ok, m32, mq, f"top-1 needed {need * 100:.1f}% (HF q8 weights: {base * 100:.1f}%)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cmpserve", required=True, help="path of the cmpserve binary")
    ap.add_argument("--workdir", help="where the GGUFs and logits go (default: a temp dir)")
    ap.add_argument("--cuda", choices=("auto", "on", "off"), default="auto",
                    help="also run --device 0: auto skips it when the binary has no CUDA")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=0)
    opt = ap.parse_args()
    if not os.access(opt.cmpserve, os.X_OK):
        print(f"check_reference: {opt.cmpserve} is not an executable", file=sys.stderr)
        return 2
    work = opt.workdir or tempfile.mkdtemp(prefix="cmpserve-ref-")
    os.makedirs(work, exist_ok=True)

    import torch
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model, config = build_hf_model(opt.seed)
    tensors = export_tensors(model, config)
    paths = {"f32": os.path.join(work, "ref-f32.gguf"), "q8_0": os.path.join(work, "ref-q8_0.gguf"),
             "f32-noreorder": os.path.join(work, "ref-f32-noreorder.gguf")}
    write_gguf(paths["f32"], config, tensors, q8=False)
    write_gguf(paths["q8_0"], config, tensors, q8=True)
    write_gguf(paths["f32-noreorder"], config, export_tensors(model, config, reorder=False), q8=False)
    rng = np.random.default_rng(opt.seed)
    prompt = [int(x) for x in rng.integers(0, config.vocab_size, N_PROMPT)]

    runs = [("f32", "cpu", False), ("q8_0", "cpu", False), ("q8_0", "cpu", True)]
    if opt.cuda != "off":
        runs += [("f32", "0", False), ("q8_0", "0", False)]
    runs.append(("f32-noreorder", "cpu", False))

    print(f"transformers reference, {config.num_hidden_layers} layers "
          f"({sum(t == 'linear_attention' for t in config.layer_types)} GDN), Gk="
          f"{config.linear_num_key_heads} Hv={config.linear_num_value_heads}, vocab "
          f"{config.vocab_size}; {N_PROMPT} prompt + {N_DECODE} decode positions; files in {work}")
    hdr = (f"{'file':<14} {'device':<9} {'max|d|/max|l|':>13} {'top-1':>7} {'mean KL':>9} "
           f"{'vs q8w: max|d|':>14} {'KL':>9}  result")
    print(hdr)
    print("-" * len(hdr))
    model_q8 = dequantized_copy(model)
    failed = 0
    for kind, device, int8 in runs:
        out = os.path.join(work, f"logits-{kind}-{device}{'-int8' if int8 else ''}.bin")
        dev_label = ("cuda:" + device if device != "cpu" else "cpu") + ("+int8" if int8 else "")
        head = f"{kind:<14} {dev_label:<9}"
        res, err = run_engine(opt.cmpserve, paths[kind], prompt, device, out, opt.threads, int8)
        if res is None:
            no_cuda = device != "cpu" and "backend" in err and "unsupported" in err
            if no_cuda and opt.cuda == "auto":
                print(f"{head} skipped ({err})")
                continue
            print(f"{head} FAIL: {err}")
            failed += 1
            continue
        ids, ours = res
        if list(ids[:N_PROMPT]) != prompt:
            print(f"{head} FAIL: the engine echoed other prompt ids")
            failed += 1
            continue
        ref = hf_logits(model, ids)
        ref_q8 = hf_logits(model_q8, ids) if kind == "q8_0" else None
        ok, m32, mq, note = judge(kind, device == "cpu" and not int8, ours, ref, ref_q8)
        verdict = "pass" if ok else "FAIL"
        if kind == "f32-noreorder":      # negative control: must not match
            verdict = "pass (differs, as it must)" if not ok else "FAIL (control matched!)"
            ok = not ok
        failed += 0 if ok else 1
        qcols = f"{mq['max_rel']:>14.2e} {mq['kl']:>9.2e}" if mq else f"{'':>14} {'':>9}"
        print(f"{head} {m32['max_rel']:>13.2e} {m32['top1'] * 100:>6.1f}% {m32['kl']:>9.2e} "
              f"{qcols}  {verdict}" + (f"; {note}" if note else ""))
    print(f"criteria: f32: max|d|/max|l| <= {F32_TOL:g} at every position vs HF f32. q8_0: vs HF f32 "
          f"mean KL <= {Q8_KL:g} and top-1 >= min({Q8_TOP1 * 100:.0f}%, HF-with-q8-weights' own "
          f"top-1 - 3 positions, 8 for int8/cuda); vs HF with the q8 weights (q8w): cpu exact (<= {F32_TOL:g}), "
          f"int8/cuda mean KL <= {Q8_KL:g}.")
    print("RESULT:", "PASS" if failed == 0 else f"FAIL ({failed} rows)")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
