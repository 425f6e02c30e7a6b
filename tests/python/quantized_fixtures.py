"""Quantized safetensors checkpoints written from each format's public description, and the reference
dequantizers, written from the same descriptions as the reference loaders implement them (transformers'
fine-grained FP8 and gpt-oss MXFP4 converters, compressed-tensors' unpack/dequantize, AutoGPTQ's and
AutoAWQ's unpacking, bitsandbytes' dequantize_4bit/int8) in numpy, independently of diffract's decoder:
bit streams are unpacked with np.unpackbits, element formats decoded by ml_dtypes.

Every writer returns (tensors, true_dense) where tensors maps names to (dtype, shape, bytes) and
true_dense maps each logical matrix name to the reference dequantizer's dense values (f64)."""
import json
import struct

import ml_dtypes
import numpy as np

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def plain(a):
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
             np.dtype(np.int64): "I64", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8",
             np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(ml_dtypes.float8_e4m3fn): "F8_E4M3",
             np.dtype(ml_dtypes.float8_e5m2): "F8_E5M2"}
    a = np.ascontiguousarray(a)
    return names[a.dtype], a.shape, a.tobytes()


# ---- bit streams (little-endian fields through 32-bit words), packed and unpacked ------------------

def pack_stream(values, bits):
    """values: [..., n] unsigned ints < 2^bits -> [..., ceil(n*bits/32)] int32 words (last axis)."""
    v = np.asarray(values, dtype=np.uint64)
    n = v.shape[-1]
    bitarr = ((v[..., :, None] >> np.arange(bits, dtype=np.uint64)) & 1).astype(np.uint8)  # [..., n, bits]
    bitarr = bitarr.reshape(*v.shape[:-1], n * bits)
    pad = -bitarr.shape[-1] % 32
    bitarr = np.concatenate([bitarr, np.zeros((*bitarr.shape[:-1], pad), np.uint8)], axis=-1)
    by = np.packbits(bitarr, axis=-1, bitorder="little")
    return by.view("<u4").view(np.int32)


def unpack_stream(words, bits, n):
    """words: [..., w] int32 (last axis) -> [..., n] field values."""
    by = np.ascontiguousarray(words).astype("<i4").view(np.uint8)
    bitarr = np.unpackbits(by, axis=-1, bitorder="little")[..., : n * bits]
    bitarr = bitarr.reshape(*by.shape[:-1], n, bits).astype(np.int64)
    return (bitarr << np.arange(bits)).sum(-1)


# ---- per-scheme writers ----------------------------------------------------------------------------

def fp8(name, w, rng, fmt="e4m3", block=None, group=None, per="tensor", scale_dtype=np.float32,
        scale_suffix="_scale", scale_shape_scalar=False):
    """FP8 codes with a per-tensor, per-channel, per-group or block scale grid (ragged last blocks)."""
    out, inn = w.shape
    dt, fmax = (ml_dtypes.float8_e4m3fn, 448.0) if fmt == "e4m3" else (ml_dtypes.float8_e5m2, 57344.0)
    if per == "tensor":
        br, bc = out, inn
    elif per == "channel":
        br, bc = 1, inn
    elif per == "group":
        br, bc = 1, group
    else:
        br, bc = block
    gr, gc = -(-out // br), -(-inn // bc)
    scale = np.zeros((gr, gc))
    for i in range(gr):
        for j in range(gc):
            scale[i, j] = np.abs(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]).max() / fmax
    scale = scale.astype(scale_dtype).astype(np.float64)
    full = np.repeat(np.repeat(scale, br, 0), bc, 1)[:out, :inn]
    codes = (w / full).astype(dt)
    dense = codes.astype(np.float64) * full  # the converters: code.to(f32) * scale
    s = scale.astype(scale_dtype)
    if per == "tensor":
        s = s.reshape(()) if scale_shape_scalar else s.reshape(1)
    return {name: plain(codes), name + scale_suffix: plain(s)}, {name: dense}


def gptq(prefix, w, rng, bits=4, group=32, act_order=False, v2=False):
    out, inn = w.shape
    g = group if group > 0 else inn
    ngroups = -(-inn // g)
    if act_order:
        perm = rng.permutation(inn)
        g_idx = np.empty(inn, np.int32)
        g_idx[perm] = np.arange(inn) // g
    else:
        g_idx = (np.arange(inn) // g).astype(np.int32)
    maxq = 2 ** bits - 1
    scales = np.zeros((ngroups, out), np.float16)
    zeros = np.zeros((ngroups, out), np.int64)
    q = np.zeros((inn, out), np.int64)
    for gi in range(ngroups):
        cols = np.where(g_idx == gi)[0]
        blk = w[:, cols]
        lo, hi = np.minimum(blk.min(1), 0), np.maximum(blk.max(1), 0)
        s = ((hi - lo) / maxq).astype(np.float16)
        s[s == 0] = 1
        z = np.clip(np.round(-lo / s.astype(np.float64)), 1, maxq)
        scales[gi], zeros[gi] = s, z
        q[cols] = np.clip(np.round(blk / s.astype(np.float64)[:, None]) + z[:, None], 0, maxq).T
    stored_z = zeros if v2 else zeros - 1
    qweight = pack_stream(q.T, bits).T  # along the input dimension, a column per output
    qzeros = pack_stream(stored_z, bits)  # along the output dimension
    tensors = {prefix + ".qweight": plain(np.ascontiguousarray(qweight)), prefix + ".qzeros": plain(qzeros),
               prefix + ".scales": plain(scales)}
    if act_order or rng.random() < 0.5:
        tensors[prefix + ".g_idx"] = plain(g_idx)
    # Reference (AutoGPTQ's dequantize): unpack, zeros + 1 (v1), scales[g_idx] * (q - zeros[g_idx]).
    uq = unpack_stream(np.ascontiguousarray(qweight.T), bits, inn).T  # [in, out]
    uz = unpack_stream(qzeros, bits, out) + (0 if v2 else 1)  # [groups, out]
    sc = scales.astype(np.float32)
    dense = (sc[g_idx] * (uq - uz[g_idx]).astype(np.float32)).T.astype(np.float64)
    return tensors, {prefix + ".weight": dense}


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE = [0, 4, 1, 5, 2, 6, 3, 7]


def awq(prefix, w, rng, group=32):
    out, inn = w.shape
    ngroups = inn // group
    scales = np.zeros((ngroups, out), np.float16)
    zeros = np.zeros((ngroups, out), np.int64)
    iw = np.zeros((inn, out), np.int64)
    for gi in range(ngroups):
        blk = w[:, gi * group:(gi + 1) * group]
        lo, hi = blk.min(1), blk.max(1)
        s = ((hi - lo) / 15).astype(np.float16)
        z = np.clip(np.round(-lo / s.astype(np.float64)), 0, 15)
        scales[gi], zeros[gi] = s, z
        iw[gi * group:(gi + 1) * group] = np.clip(np.round(blk / s.astype(np.float64)[:, None]) + z[:, None], 0, 15).T

    def pack(a):  # AutoAWQ: word col holds columns col*8 + AWQ_ORDER[i] in nibble i
        r = np.zeros((a.shape[0], a.shape[1] // 8), np.uint32)
        for col in range(a.shape[1] // 8):
            for i in range(8):
                r[:, col] |= (a[:, col * 8 + AWQ_ORDER[i]].astype(np.uint32) << (i * 4))
        return r.view(np.int32)

    qweight, qzeros = pack(iw), pack(zeros)

    def unpack(a):  # AutoAWQ's unpack_awq + reverse_awq_order
        shifts = np.arange(0, 32, 4)
        v = ((a.view(np.uint32)[:, :, None] >> shifts[None, None, :]) & 0xF).reshape(a.shape[0], -1)
        order = np.arange(v.shape[1]).reshape(-1, 8)[:, AWQ_REVERSE].reshape(-1)
        return v[:, order].astype(np.int64)

    uq, uz = unpack(qweight), unpack(qzeros)
    gidx = np.arange(inn) // group
    dense = ((uq - uz[gidx]).astype(np.float32) * scales.astype(np.float32)[gidx]).T.astype(np.float64)
    return ({prefix + ".qweight": plain(qweight), prefix + ".qzeros": plain(qzeros), prefix + ".scales": plain(scales)},
            {prefix + ".weight": dense})


def packed_int(prefix, w, rng, bits=4, group=32):
    """compressed-tensors pack-quantized, symmetric: (q + 2^(b-1)) packed along the input dimension."""
    out, inn = w.shape
    qmax = 2 ** (bits - 1) - 1
    ngroups = -(-inn // group)
    scale = np.zeros((out, ngroups), np.float32)
    q = np.zeros((out, inn), np.int64)
    for gi in range(ngroups):
        blk = w[:, gi * group:(gi + 1) * group]
        s = (np.abs(blk).max(1) / qmax).astype(ml_dtypes.bfloat16).astype(np.float32)
        scale[:, gi] = s
        q[:, gi * group:(gi + 1) * group] = np.clip(np.round(blk / s[:, None]), -qmax - 1, qmax)
    packed = pack_stream(q + 2 ** (bits - 1), bits)
    uq = unpack_stream(packed, bits, inn) - 2 ** (bits - 1)
    dense = (uq.astype(np.float32) * np.repeat(scale, group, 1)[:, :inn]).astype(np.float64)
    return ({prefix + ".weight_packed": plain(packed), prefix + ".weight_shape": plain(np.array([out, inn], np.int64)),
             prefix + ".weight_scale": plain(scale.astype(ml_dtypes.bfloat16))},
            {prefix + ".weight": dense})


def nearest_e2m1(x):
    idx = np.abs(np.abs(x)[..., None] - E2M1[None, :8]).argmin(-1)
    return np.where(x < 0, idx + 8, idx).astype(np.uint8)


def nvfp4(prefix, w, rng):
    out, inn = w.shape
    global_scale = np.float32(448.0 * 6.0 / np.abs(w).max())
    blk = w.reshape(out, inn // 16, 16)
    s = (np.abs(blk).max(-1) / 6.0 * global_scale).astype(ml_dtypes.float8_e4m3fn)
    eff = s.astype(np.float32) / global_scale
    codes = nearest_e2m1(blk / eff[..., None]).reshape(out, inn)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    # Reference (compressed-tensors): unpack low nibble first, scale.to(f32) / global_scale, x_q * scale.
    lo, hi = packed & 0xF, packed >> 4
    unpacked = np.empty((out, inn), np.float32)
    unpacked[:, 0::2], unpacked[:, 1::2] = E2M1[lo], E2M1[hi]
    dense = (unpacked.reshape(out, inn // 16, 16) * (s.astype(np.float32) / global_scale)[..., None]).reshape(out, inn)
    return ({prefix + ".weight_packed": plain(packed), prefix + ".weight_scale": plain(s),
             prefix + ".weight_global_scale": plain(np.array([global_scale], np.float32))},
            {prefix + ".weight": dense.astype(np.float64)})


def mxfp4_experts(prefix, experts_w, fused):
    """gpt-oss: experts_w [E, out, in] (for the fused gate_up: out = 2I with gate rows even, up odd)."""
    E, out, inn = experts_w.shape
    blk = experts_w.reshape(E, out, inn // 32, 32)
    exp = np.floor(np.log2(np.maximum(np.abs(blk).max(-1), 1e-30) / 6.0)).astype(np.int64)
    exp = np.clip(exp + 1, -127, 127)
    scales = (exp + 127).astype(np.uint8)
    codes = nearest_e2m1(blk / np.ldexp(1.0, exp)[..., None])
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)  # [E, out, G, 16]
    # Reference: transformers' convert_moe_packed_tensors, then .transpose(1, 2) -> [E, in, out].
    lo, hi = blocks & 0x0F, blocks >> 4
    sub = np.empty((E, out, inn // 32, 32), np.float32)
    sub[..., 0::2], sub[..., 1::2] = E2M1[lo], E2M1[hi]
    sub = np.ldexp(sub, (scales.astype(np.int32) - 127)[..., None])
    param = sub.reshape(E, out, inn).transpose(0, 2, 1)  # what the model holds: x @ param
    dense = {}
    owner, proj = prefix.rsplit(".", 1)
    for e in range(E):
        if fused:
            dense[f"{owner}.{e}.gate_proj.weight"] = param[e][:, ::2].T.astype(np.float64)
            dense[f"{owner}.{e}.up_proj.weight"] = param[e][:, 1::2].T.astype(np.float64)
        else:
            dense[f"{owner}.{e}.{proj}.weight"] = param[e].T.astype(np.float64)
    return {prefix + "_blocks": plain(blocks), prefix + "_scales": plain(scales)}, dense


NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], np.float32)


def bnb_4bit(name, w, rng, blocksize=64, double=False, kind="nf4"):
    out, inn = w.shape
    flat = w.reshape(-1)
    n = flat.size
    nblocks = -(-n // blocksize)
    padded = np.concatenate([flat, np.zeros(nblocks * blocksize - n)])
    absmax = np.abs(padded.reshape(nblocks, blocksize)).max(1).astype(np.float32)
    qmap = NF4 if kind == "nf4" else np.sort(E2M1 / 6.0).astype(np.float32)
    norm = padded / np.repeat(absmax, blocksize)
    codes = np.abs(norm[:, None] - qmap[None, :]).argmin(1).astype(np.uint8)[:n]
    codes = np.concatenate([codes, np.zeros(n % 2, np.uint8)])
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).reshape(-1, 1)
    state = {"quant_type": kind, "blocksize": blocksize, "dtype": "bfloat16", "shape": [out, inn]}
    tensors = {name: plain(packed), name + ".quant_map": plain(qmap)}
    if double:
        nested_block = 256
        offset = float(absmax.mean())
        centred = absmax - offset
        nb = -(-nblocks // nested_block)
        cpad = np.concatenate([centred, np.zeros(nb * nested_block - nblocks, np.float32)])
        nested_absmax = np.abs(cpad.reshape(nb, nested_block)).max(1).astype(np.float32)
        nested_map = np.linspace(-1, 1, 256).astype(np.float32)
        ncodes = np.abs((cpad / np.repeat(nested_absmax, nested_block))[:, None] - nested_map[None]).argmin(1)
        absmax_u8 = ncodes[:nblocks].astype(np.uint8)
        tensors[name + ".absmax"] = plain(absmax_u8)
        tensors[name + ".nested_absmax"] = plain(nested_absmax)
        tensors[name + ".nested_quant_map"] = plain(nested_map)
        state.update({"nested_blocksize": nested_block, "nested_dtype": "float32", "nested_offset": offset})
        # bnb dequantize_4bit: absmax = dequantize_blockwise(absmax_u8, state2) + offset
        real_absmax = nested_map[absmax_u8] * np.repeat(nested_absmax, nested_block)[:nblocks] + np.float32(offset)
    else:
        tensors[name + ".absmax"] = plain(absmax)
        real_absmax = absmax
    tensors[name + f".quant_state.bitsandbytes__{kind}"] = ("U8", (len(json.dumps(state)),), json.dumps(state).encode())
    # Reference: high nibble is the even element; code[nib] * absmax[i // blocksize].
    hi, lo = packed.reshape(-1) >> 4, packed.reshape(-1) & 0xF
    nib = np.empty(2 * hi.size, np.uint8)
    nib[0::2], nib[1::2] = hi, lo
    dense = (qmap[nib[:n]] * np.repeat(real_absmax.astype(np.float32), blocksize)[:n]).reshape(out, inn)
    return tensors, {name: dense.astype(np.float64)}


def bnb_int8(name, w, rng):
    scb = np.abs(w).max(1).astype(np.float32)
    q = np.clip(np.round(w * 127 / scb[:, None]), -127, 127).astype(np.int8)
    prefix = name[: -len(".weight")]
    dense = (q.astype(np.float32) * scb[:, None] / 127).astype(np.float64)
    return ({name: plain(q), prefix + ".SCB": plain(scb), prefix + ".weight_format": ("U8", (), b"\x00")},
            {name: dense})
