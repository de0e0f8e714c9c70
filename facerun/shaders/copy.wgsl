// A strided copy over a (merged, at most 6-D) index: out[dst0 + sum c_d * dst_d] = x[src0 + sum c_d * src_d].
// Transpose and Slice (a gather into a contiguous out) and each input of a Concat (a contiguous input placed into
// its slice of out) are both this.

struct Params {
    total: u32,
    row: u32,
    src0: u32,
    dst0: u32,
    shape: array<vec4<u32>, 2>,
    src: array<vec4<u32>, 2>,
    dst: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, lid, p.row);
    if (i >= p.total) {
        return;
    }
    var rest = i;
    var si = p.src0;
    var di = p.dst0;
    for (var d = 5; d >= 0; d--) {
        let size = p.shape[d / 4][d % 4];
        let c = rest % size;
        rest = rest / size;
        si += c * p.src[d / 4][d % 4];
        di += c * p.dst[d / 4][d % 4];
    }
    out[di] = x[si];
}
