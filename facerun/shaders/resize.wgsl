// Nearest-neighbour resize: out[plane, y, x] = in[plane, src_y[y], src_x[x]]; the index maps are resolved ahead and
// stored one after the other in `maps`. With `add`, the Add reading it is folded in (gpu/fusion.py): out[i] also
// adds addend[i], as the Add's own kernel would (the same f32 sum).

struct Params {
    total: u32,
    row: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    add: u32,
}

#bindings x, maps: u32, addend

#per_value main total
    let ox = i % p.ow;
    let oy = (i / p.ow) % p.oh;
    let plane = i / (p.ow * p.oh);
    let v = x[(plane * p.h + maps[oy]) * p.w + maps[p.oh + ox]];
    if (p.add != 0u) {
        out[i] = v + addend[i];
    } else {
        out[i] = v;
    }
}
