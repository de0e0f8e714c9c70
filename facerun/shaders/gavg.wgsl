// Global average pooling: one workgroup per (batch, channel) plane, its threads adding up the plane in a fixed order.

struct Params {
    planes: u32,
    plane: u32,  // values per plane
    row: u32,
}

#bindings x

var<workgroup> sums: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let plane = wid.y * p.row + wid.x;
    if (plane >= p.planes) {
        return;
    }
    var acc = 0.0;
    for (var j = lid; j < p.plane; j += 64u) {
        acc += x[plane * p.plane + j];
    }
    sums[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s / 2u) {
        if (lid < s) {
            sums[lid] += sums[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[plane] = sums[0] / f32(p.plane);
    }
}
