// Max and average pooling over H and W, one thread per output value. Windows may reach past the input (padding,
// ceil mode): max ignores those cells; average divides by the valid cells, or with count_include_pad by the cells
// inside the declared padding.

struct Params {
    total: u32,
    row: u32,
    kind: u32,  // POOL_MAX or POOL_AVG
    include_pad: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    dh: u32,
    dw: u32,
    pt: u32,
    pl: u32,
    pb: u32,
    pr: u32,
    empty: u32,  // the bits of -inf: a window with no input cell (a constant inf would not compile)
}

#bindings x

#per_value main total
    let ox = i % p.ow;
    let oy = (i / p.ow) % p.oh;
    let plane = i / (p.ow * p.oh);
    let base = plane * p.h * p.w;
    let iy0 = i32(oy * p.sh) - i32(p.pt);
    let ix0 = i32(ox * p.sw) - i32(p.pl);
    var best = -3.4028235e38;
    var any = false;
    var sum = 0.0;
    var count = 0u;
    for (var ky = 0u; ky < p.kh; ky++) {
        let iy = iy0 + i32(ky * p.dh);
        let row_in = iy >= 0 && iy < i32(p.h);
        let row_pad = iy >= -i32(p.pt) && iy < i32(p.h + p.pb);
        for (var kx = 0u; kx < p.kw; kx++) {
            let ix = ix0 + i32(kx * p.dw);
            let inside = row_in && ix >= 0 && ix < i32(p.w);
            if (inside) {
                let v = x[base + u32(iy) * p.w + u32(ix)];
                if (!any || v > best) {
                    best = v;
                }
                any = true;
                sum += v;
            }
            if (p.include_pad != 0u) {
                if (row_pad && ix >= -i32(p.pl) && ix < i32(p.w + p.pr)) {
                    count += 1u;
                }
            } else if (inside) {
                count += 1u;
            }
        }
    }
    if (p.kind == POOL_AVG) {
        out[i] = sum / f32(max(count, 1u));
    } else {
        out[i] = select(bitcast<f32>(p.empty), best, any);
    }
}
