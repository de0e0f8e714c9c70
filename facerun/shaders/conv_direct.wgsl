// Convolutions with few output channels per group and a short window: `depthwise` (one input channel per output
// channel) makes four neighbouring outputs of a row per thread, `direct` (tiny heads) one output per thread,
// looping over its window. Also `reduce`, the second pass of a split-K tiled convolution: it adds the K slices'
// partial sums in slice order (deterministic) and applies the epilogue.

struct Params {
#fields epilogue
    total: u32,  // output values
    row: u32,
    m: u32,  // output channels per group
    cin: u32,
    cg: u32,
    cout: u32,
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
    splits: u32,
    quads: u32,  // depthwise: threads in all, one per four outputs of a row
    out_b: u32,  // output element strides of batch, channel and position: NCHW, or NHWC when a transpose was fused
    out_c: u32,  // into the convolution
    out_p: u32,
}

// x: the input (for `reduce`, the partial sums); wt: the weights OIHW, as the model has them
#bindings x, wt, epi, res

#per_value direct total
    let ox = i % p.ow;
    var t = i / p.ow;
    let oy = t % p.oh;
    t = t / p.oh;
    let co = t % p.cout;
    let b = t / p.cout;
    let g = co / p.m;
    let hw = p.h * p.w;
    let iy0 = i32(oy * p.sh) - i32(p.pt);
    let ix0 = i32(ox * p.sw) - i32(p.pl);
    var acc = 0.0;
    var wi = co * p.cg * p.kh * p.kw;
    var xi = (b * p.cin + g * p.cg) * hw;
    for (var ci = 0u; ci < p.cg; ci++) {
        for (var ky = 0u; ky < p.kh; ky++) {
            let iy = iy0 + i32(ky * p.dh);
            if (iy < 0 || iy >= i32(p.h)) {
                continue;
            }
            let xrow = xi + u32(iy) * p.w;
            for (var kx = 0u; kx < p.kw; kx++) {
                let ix = ix0 + i32(kx * p.dw);
                if (ix >= 0 && ix < i32(p.w)) {
                    acc = fma(x[xrow + u32(ix)], wt[wi + ky * p.kw + kx], acc);
                }
            }
        }
        wi += p.kh * p.kw;
        xi += hw;
    }
    let at = b * p.out_b + co * p.out_c + (oy * p.ow + ox) * p.out_p;
    out[at] = finish(acc, co, at);
}

#per_value depthwise quads
    let per_row = (p.ow + 3u) / 4u;
    let ox0 = (i % per_row) * 4u;
    var t = i / per_row;
    let oy = t % p.oh;
    t = t / p.oh;
    let co = t % p.cout;
    let b = t / p.cout;
    let xi = (b * p.cin + co / p.m) * p.h * p.w;
    let wi = co * p.kh * p.kw;
    let iy0 = i32(oy * p.sh) - i32(p.pt);
#unroll j 0 4
    var acc${j} = 0.0;
    let ix${j} = i32((ox0 + ${j}u) * p.sw) - i32(p.pl);
#end
    for (var ky = 0u; ky < p.kh; ky++) {
        let iy = iy0 + i32(ky * p.dh);
        if (iy < 0 || iy >= i32(p.h)) {
            continue;
        }
        let xrow = xi + u32(iy) * p.w;
        for (var kx = 0u; kx < p.kw; kx++) {
            let wv = wt[wi + ky * p.kw + kx];
            let dx = i32(kx * p.dw);
#unroll j 0 4
            if (ix${j} + dx >= 0 && ix${j} + dx < i32(p.w)) {
                acc${j} = fma(x[xrow + u32(ix${j} + dx)], wv, acc${j});
            }
#end
        }
    }
    let at0 = b * p.out_b + co * p.out_c + (oy * p.ow + ox0) * p.out_p;
#unroll j 0 4
    if (ox0 + ${j}u < p.ow) {
        out[at0 + ${j}u * p.out_p] = finish(acc${j}, co, at0 + ${j}u * p.out_p);
    }
#end
}

#per_value reduce total
    var v = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        v += x[s * p.total + i];
    }
    let ohw = p.oh * p.ow;
    let co = (i / ohw) % p.cout;
    let at = (i / (ohw * p.cout)) * p.out_b + co * p.out_c + (i % ohw) * p.out_p;
    out[at] = finish(v, co, at);
}
