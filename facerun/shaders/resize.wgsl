// Nearest-neighbour resize: out[plane, y, x] = in[plane, src_y[y], src_x[x]]; the index maps are resolved ahead and
// stored one after the other in `maps`.

struct Params {
    total: u32,
    row: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> maps: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, lid, p.row);
    if (i >= p.total) {
        return;
    }
    let ox = i % p.ow;
    let oy = (i / p.ow) % p.oh;
    let plane = i / (p.ow * p.oh);
    out[i] = x[(plane * p.h + maps[oy]) * p.w + maps[p.oh + ox]];
}
