// Candidate rows of a detector's grid heads (runner.Candidates), one level (stride) of `total / positions` items
// from item `item` on, in one dispatch: each position of an item's own grid (its photo size in `photos`, over the
// stride) whose scores pass the floor is appended to that item's region of `out`: word 0 counts the rows (the host
// clears it), rows start at word 4, each the key (tag + position in the own grid, row-major), the two scores, then
// the value heads' values. Rows past `cap` are counted, not written (the host then reads the heads whole). An item's
// heads start at item * per_item positions (0 where the program holds one item a run), its region at item * step.

struct Params {
    total: u32,
    row: u32,
    cols: u32,
    item: u32,
    per_item: u32,
    positions: u32,
    stride: u32,
    tag: u32,
    floor: f32,
    cap: u32,
    width: u32,
    step: u32,
    w0: u32,
    w1: u32,
    w2: u32,
}

#bindings a, b, v0, v1, v2 -> atomic<u32>
@group(0) @binding(7) var<storage, read> photos: array<u32>;

#per_value main total
    let item = p.item + i / p.positions;
    let q = i % p.positions;
    let r = q / p.cols;
    let c = q % p.cols;
    let rows = photos[2u * item] / p.stride;
    let own = photos[2u * item + 1u] / p.stride;
    if (r >= rows || c >= own) {
        return;
    }
    let g = item * p.per_item + q;
    let region = item * p.step;
    let sa = a[g];
    let sb = b[g];
    // NaN fails the comparison, as it fails the family's own threshold
    if (!(clamp(sa, 0.0, 1.0) * clamp(sb, 0.0, 1.0) >= p.floor)) {
        return;
    }
    let k = atomicAdd(&out[region], 1u);
    if (k >= p.cap) {
        return;
    }
    var at = region + 4u + k * p.width;
    atomicStore(&out[at], p.tag + r * own + c);
    atomicStore(&out[at + 1u], bitcast<u32>(sa));
    atomicStore(&out[at + 2u], bitcast<u32>(sb));
    at += 3u;
    for (var j = 0u; j < p.w0; j++) {
        atomicStore(&out[at + j], bitcast<u32>(v0[g * p.w0 + j]));
    }
    at += p.w0;
    for (var j = 0u; j < p.w1; j++) {
        atomicStore(&out[at + j], bitcast<u32>(v1[g * p.w1 + j]));
    }
    at += p.w1;
    for (var j = 0u; j < p.w2; j++) {
        atomicStore(&out[at + j], bitcast<u32>(v2[g * p.w2 + j]));
    }
}
