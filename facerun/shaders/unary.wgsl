// Elementwise steps over NCHW: an activation alone (Unary), or a per-channel affine x * scale[c] + shift[c] before
// it (Affine: a batch norm that could not be folded). `coef` holds scale, shift (affine only) and prelu slopes.

struct Params {
    total: u32,
    row: u32,
    act: u32,
    lo: f32,
    hi: f32,
    alpha: f32,
    slope_at: u32,
    plane: u32,  // values per channel (product of the dims after the channel axis)
    channels: u32,
    affine: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> coef: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, lid, p.row);
    if (i >= p.total) {
        return;
    }
    let ch = (i / p.plane) % p.channels;
    var v = x[i];
    if (p.affine != 0u) {
        v = fma(v, coef[ch], coef[p.channels + ch]);
    }
    var slope = 0.0;
    if (p.act == 5u) {
        slope = coef[p.slope_at + ch];
    }
    out[i] = activate(v, p.act, p.lo, p.hi, p.alpha, slope);
}
