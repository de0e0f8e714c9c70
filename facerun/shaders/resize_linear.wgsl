// Bilinear resize: out[plane, y, x] blends in[plane, y0|y1, x0|x1] with weights wy[y], wx[x] on the second of
// each pair; `maps` holds y0, y1, x0, x1 one after the other, `weights` wy then wx.

struct Params {
    total: u32,
    row: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
}

#bindings x, maps: u32, weights

#per_value main total
    let ox = i % p.ow;
    let oy = (i / p.ow) % p.oh;
    let base = (i / (p.ow * p.oh)) * p.h * p.w;
    let r0 = base + maps[oy] * p.w;
    let r1 = base + maps[p.oh + oy] * p.w;
    let c0 = maps[2u * p.oh + ox];
    let c1 = maps[2u * p.oh + p.ow + ox];
    let wy = weights[oy];
    let wx = weights[p.oh + ox];
    let top = mix(x[r0 + c0], x[r0 + c1], wx);
    let bottom = mix(x[r1 + c0], x[r1 + c1], wx);
    out[i] = mix(top, bottom, wy);
}
