// Softmax over the middle axis of (outer, n, inner): one thread per (outer, inner) line.

struct Params {
    count: u32,  // outer * inner
    row: u32,
    n: u32,
    inner: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, lid, p.row);
    if (i >= p.count) {
        return;
    }
    let o = i / p.inner;
    let base = o * p.n * p.inner + (i - o * p.inner);
    var top = x[base];
    for (var j = 1u; j < p.n; j++) {
        top = max(top, x[base + j * p.inner]);
    }
    var sum = 0.0;
    for (var j = 0u; j < p.n; j++) {
        sum += exp(x[base + j * p.inner] - top);
    }
    for (var j = 0u; j < p.n; j++) {
        out[base + j * p.inner] = exp(x[base + j * p.inner] - top) / sum;
    }
}
