// Winograd F(4x4, 3x3) for a 3x3 convolution at stride 1: the two transforms around its 36 products (as in
// winograd.wgsl, the products are the tiled kernel's pointwise form, one group per transformed position). Against
// F(2x2, 3x3) it makes 2.25 multiplies an output instead of 4, and its planes are 2.25x the input instead of 4x.
// Interpolation points 0, ±1, ±2 (Lavin & Gray's matrices); the weights' transform G g Gᵀ is made on the host.
//
// `input`: one thread per (input channel, 4x4 output tile) reads the tile's 6x6 input patch (zero outside the image)
// and writes V = Bᵀ d B as 36 planes, v[e][c][t] with e = 6a + b, tiles fastest.
// `output`: one thread per (output channel, tile) reads the 36 products m[e][co][t] and writes Y = Aᵀ M A, cropped
// at the edges, through the epilogue (bias, residual, activation) in the output's layout.

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

// Bᵀ z for a column (or row) z of six values
fn bt(z0: f32, z1: f32, z2: f32, z3: f32, z4: f32, z5: f32) -> array<f32, 6> {
    return array<f32, 6>(
        4.0 * z0 - 5.0 * z2 + z4,
        z3 + z4 - 4.0 * (z1 + z2),
        z4 - z3 + 4.0 * (z1 - z2),
        z4 - z2 + 2.0 * (z3 - z1),
        z4 - z2 + 2.0 * (z1 - z3),
        4.0 * z1 - 5.0 * z3 + z5);
}

// Aᵀ z for six products: four outputs
fn at(z0: f32, z1: f32, z2: f32, z3: f32, z4: f32, z5: f32) -> vec4<f32> {
    let s = z1 + z2;
    let d = z1 - z2;
    let s2 = z3 + z4;
    let d2 = z3 - z4;
    return vec4<f32>(z0 + s + s2, d + 2.0 * d2, s + 4.0 * s2, d + 8.0 * d2 + z5);
}

#per_value input count
    let t = i % p.tiles;
    let c = i / p.tiles;
    let per = p.th * p.tw;
    let b = t / per;
    let ty = (t - b * per) / p.tw;
    let tx = t - b * per - ty * p.tw;
    let y0 = i32(ty * 4u) - i32(p.pt);
    let x0 = i32(tx * 4u) - i32(p.pl);
    let base = (b * p.cin + c) * p.h * p.w;
#if AFFINE
    // a batch norm folded in (coef: its scales, then its shifts): applied to the values read, so padding stays zero
    let scale = coef[c];
    let shift = coef[p.cin + c];
#end
    // the patch's rows
#unroll r 0 6
    var d${r} = array<f32, 6>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    if (y0 + ${r} >= 0 && y0 + ${r} < i32(p.h)) {
        let row = base + u32(y0 + ${r}) * p.w;
#unroll q 0 6
        if (x0 + ${q} >= 0 && x0 + ${q} < i32(p.w)) {
            d${r}[${q}] = f32(x[row + u32(x0 + ${q})]);
#if AFFINE
            d${r}[${q}] = fma(d${r}[${q}], scale, shift);
#end
        }
#end
    }
#end
    // Bᵀ d, a column at a time: c_q[a] = (Bᵀ d)[a][q]
#unroll q 0 6
    let c${q} = bt(d0[${q}], d1[${q}], d2[${q}], d3[${q}], d4[${q}], d5[${q}]);
#end
    // then each row of it (· B): V[a][b]
    let plane = p.cin * p.tiles;
    let at0 = c * p.tiles + t;
#unroll a 0 6
    {
        let v = bt(c0[${a}], c1[${a}], c2[${a}], c3[${a}], c4[${a}], c5[${a}]);
#unroll e 0 6
        out[at0 + ${6 * a + e}u * plane] = out_t(v[${e}]);
#end
    }
#end
}

#per_value output count
    let t = i % p.tiles;
    let co = i / p.tiles;
    let plane = p.cout * p.tiles;
    let at0 = co * p.tiles + t;
#unroll a 0 6
    var m${a} = array<f32, 6>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
#unroll e 0 6
    m${a}[${e}] = f32(x[at0 + ${6 * a + e}u * plane]);
#end
#end
    // Aᵀ M, a column at a time: s_q[r] = (Aᵀ M)[r][q]; then each row of it (· A)
#unroll q 0 6
    let s${q} = at(m0[${q}], m1[${q}], m2[${q}], m3[${q}], m4[${q}], m5[${q}]);
#end
#unroll r 0 4
    let y${r} = at(s0[${r}], s1[${r}], s2[${r}], s3[${r}], s4[${r}], s5[${r}]);
#end
    let per = p.th * p.tw;
    let b = t / per;
    let ty = (t - b * per) / p.tw;
    let oy = ty * 4u;
    let ox = (t - b * per - ty * p.tw) * 4u;
    let base = b * p.out_b + co * p.out_c;
#unroll r 0 4
#unroll q 0 4
    if (oy + ${r}u < p.oh && ox + ${q}u < p.ow) {
        let o = base + ((oy + ${r}u) * p.ow + ox + ${q}u) * p.out_p;
        out[o] = out_t(finish(y${r}[${q}], co, o));
    }
#end
#end
}
