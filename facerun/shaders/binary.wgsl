// out = act(a (op) b) with broadcasting: both operands are read through strides over out's (merged, at most
// 6-D) index, 0 on a broadcast dimension. op: 0 add, 1 sub, 2 mul, 3 div, 4 prelu (b the slope).

struct Params {
    total: u32,
    row: u32,
    act: u32,
    lo: f32,
    hi: f32,
    alpha: f32,
    slope_at: u32,
    plane: u32,
    channels: u32,
    op: u32,
    shape: array<vec4<u32>, 2>,  // out's dims, innermost last, padded in front with 1
    sa: array<vec4<u32>, 2>,
    sb: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> coef: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, lid, p.row);
    if (i >= p.total) {
        return;
    }
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 5; d >= 0; d--) {
        let size = p.shape[d / 4][d % 4];
        let c = rest % size;
        rest = rest / size;
        ia += c * p.sa[d / 4][d % 4];
        ib += c * p.sb[d / 4][d % 4];
    }
    let x = a[ia];
    let y = b[ib];
    var v: f32;
    switch p.op {
        case 0u: { v = x + y; }
        case 1u: { v = x - y; }
        case 2u: { v = x * y; }
        case 3u: { v = x / y; }
        default: { v = select(x, x * y, x < 0.0); }
    }
    var slope = 0.0;
    if (p.act == 5u) {
        slope = coef[p.slope_at + (i / p.plane) % p.channels];
    }
    out[i] = activate(v, p.act, p.lo, p.hi, p.alpha, slope);
}
