// Winograd F(2x2, 3x3) for a 3x3 convolution at stride 1: the two transforms around its 16 products (the products
// are the tiled kernel's pointwise form, one group per transformed position: facerun/gpu/plan.py `WinogradPlan`).
//
// `input`: one thread per (input channel, 2x2 output tile) reads the tile's 4x4 input patch (zero outside the image)
// and writes V = Bᵀ d B as 16 planes, v[e][c][t] with e = 4a + b, tiles fastest: the stores coalesce, and the
// products read each plane as the input of a 1x1 convolution.
// `output`: one thread per (output channel, tile) reads the 16 products m[e][co][t] and writes Y = Aᵀ M A, cropped at
// odd edges, through the epilogue (bias, residual, activation) in the output's layout.

struct Params {
#fields epilogue
    cin: u32,
    cout: u32,
    h: u32,  // the input's rows and columns
    w: u32,
    oh: u32,
    ow: u32,
    pt: u32,
    pl: u32,
    th: u32,  // tiles per column and per row
    tw: u32,
    tiles: u32,  // batch * th * tw
    count: u32,  // threads: cin * tiles (input) or cout * tiles (output)
    row: u32,
    out_b: u32,  // output element strides of batch, channel and position (NCHW, or NHWC when a transpose was fused)
    out_c: u32,
    out_p: u32,
}

// --precision f16: the input transform writes its planes as f16 (HALF_OUT), which the products read (f32 sums);
// the output transform reads the products as f16 (HALF_IN) where they were written so
alias in_t = ${"f16" if HALF_IN else "f32"};
alias out_t = ${"f16" if HALF_OUT else "f32"};
#bindings x: in_t, coef, epi, res -> out_t

#per_value input count
    let t = i % p.tiles;
    let c = i / p.tiles;
    let per = p.th * p.tw;
    let b = t / per;
    let ty = (t - b * per) / p.tw;
    let tx = t - b * per - ty * p.tw;
    let y0 = i32(ty * 2u) - i32(p.pt);
    let x0 = i32(tx * 2u) - i32(p.pl);
    let base = (b * p.cin + c) * p.h * p.w;
#if AFFINE
    // a batch norm folded in (coef: its scales, then its shifts): applied to the values read, so padding stays zero
    let scale = coef[c];
    let shift = coef[p.cin + c];
#end
    // the patch's rows, each a vec4 of its four columns
#unroll r 0 4
    var d${r} = vec4<f32>(0.0);
    if (y0 + ${r} >= 0 && y0 + ${r} < i32(p.h)) {
        let row = base + u32(y0 + ${r}) * p.w;
#unroll q 0 4
        if (x0 + ${q} >= 0 && x0 + ${q} < i32(p.w)) {
            d${r}[${q}] = f32(x[row + u32(x0 + ${q})]);
#if AFFINE
            d${r}[${q}] = fma(d${r}[${q}], scale, shift);
#end
        }
#end
    }
#end
    // Bᵀ d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3; then the same on each row's columns (· B)
    let r0 = d0 - d2;
    let r1 = d1 + d2;
    let r2 = d2 - d1;
    let r3 = d1 - d3;
    let plane = p.cin * p.tiles;
    let at = c * p.tiles + t;
#unroll a 0 4
    out[at + ${4 * a + 0}u * plane] = out_t(r${a}.x - r${a}.z);
    out[at + ${4 * a + 1}u * plane] = out_t(r${a}.y + r${a}.z);
    out[at + ${4 * a + 2}u * plane] = out_t(r${a}.z - r${a}.y);
    out[at + ${4 * a + 3}u * plane] = out_t(r${a}.y - r${a}.w);
#end
}

#per_value output count
    let t = i % p.tiles;
    let co = i / p.tiles;
    let plane = p.cout * p.tiles;
    let at = co * p.tiles + t;
#unroll a 0 4
    let m${a} = vec4<f32>(f32(x[at + ${4 * a}u * plane]), f32(x[at + ${4 * a + 1}u * plane]),
                          f32(x[at + ${4 * a + 2}u * plane]), f32(x[at + ${4 * a + 3}u * plane]));
#end
    // Aᵀ M: rows m0 + m1 + m2 and m1 - m2 - m3; then the same on each row's columns (· A)
    let s0 = m0 + m1 + m2;
    let s1 = m1 - m2 - m3;
    let y00 = s0.x + s0.y + s0.z;
    let y01 = s0.y - s0.z - s0.w;
    let y10 = s1.x + s1.y + s1.z;
    let y11 = s1.y - s1.z - s1.w;
    let per = p.th * p.tw;
    let b = t / per;
    let oy = (t - b * per) / p.tw * 2u;
    let ox = (t - b * per - (oy / 2u) * p.tw) * 2u;
    let base = b * p.out_b + co * p.out_c;
#unroll r 0 2
#unroll q 0 2
    if (oy + ${r}u < p.oh && ox + ${q}u < p.ow) {
        let o = base + ((oy + ${r}u) * p.ow + ox + ${q}u) * p.out_p;
        out[o] = out_t(finish(y${r}${q}, co, o));
    }
#end
#end
}
