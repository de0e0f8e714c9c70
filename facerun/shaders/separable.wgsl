// A 1x1 convolution and the depthwise 3x3 (stride 1, padding 1) reading it, in one pass (plan.SeparablePlan). A
// workgroup owns a th x tw tile of output positions for 4 * QUADS channels of one image, (th + 2) x (tw + 2) = 256
// positions with the tile's one-position border. Each thread first makes the 1x1's outputs of one of those positions
// for all the workgroup's channels (one input value read for 4 * QUADS products) into workgroup memory: 0 outside the
// image and past the mask, as the 1x1's own masked output and the depthwise's zero padding would be there. Then each
// thread of the tile takes one output position through the 3x3 window and the epilogue. The 1x1's output never
// goes to device memory.

struct Params {
#fields epilogue
    count: u32,  // workgroups in all: tiles * blocks * batch
    row: u32,
    cin: u32,  // the 1x1's input channels
    cout: u32,  // channels of the 1x1's output and of the depthwise's
    h: u32,  // rows and columns of both outputs (and of the 1x1's input)
    w: u32,
    xw: u32,  // x's columns and values a channel: w and h * w, or a pooled x's (POOLED)
    xhw: u32,
    th: u32,  // the tile: (th + 2) * (tw + 2) = 256
    tw: u32,
    tiles_x: u32,
    tiles: u32,
    blocks: u32,  // channel blocks of 4 * QUADS
    pw_bias: u32,  // where the 1x1's bias starts in `pw` (after its weights), or 0: none
    out_b: u32,  // output element strides of batch, channel and position: NCHW, or NHWC when a transpose was fused
    out_c: u32,
    out_p: u32,
    // HEADS: per head k (up to 4), its first channel (past the last head: 0xffffffff), where its output starts in
    // `out` (elements), its batch, channel and position strides, and its activation code
    heads: array<vec4<u32>, 6>,
}

// POOLED: x is a 2x2 max pool's input (lower.pooled_inputs), the 1x1 reading each window's largest value, so the
// pool's output is never written.
// x: the 1x1's input NCHW; pw: its weights by channel quad (pw[q * cin + ci] = w[4q..4q+3, ci]), then its bias by
// quad; dwt: the depthwise weights by quad and tap (dwt[q * 9 + tap])
#bindings x, pw: vec4<f32>, epi, res, dwt: vec4<f32>

// HEADS: a head group (lower._heads): the 1x1s of several heads reading one input, stacked into one of all their
// channels, and their depthwise 3x3s; channel c belongs to head k = the heads starting at or before it, and goes to
// that head's output with its layout and activation. The mask comes from the position itself (the heads' layouts
// differ, so `finish`'s reading of it from the output index would not do).
fn head_of(c: u32) -> u32 {
    return u32(c >= p.heads[0].y) + u32(c >= p.heads[0].z) + u32(c >= p.heads[0].w);
}

fn finish_head(v0: f32, c: u32, k: u32, b: u32, oy: u32, ox: u32) -> f32 {
    if (p.vh != 0u) {
        let keep = mask_limits(b);
        if (oy >= keep.x || ox >= keep.y) {
            return 0.0;
        }
    }
    var v = v0;
    if (p.has_bias != 0u) {
        v += epi[c];
    }
    return activate(v, p.heads[5][k], p.lo, p.hi, p.alpha, 0.0);
}

var<workgroup> mid: array<vec4<f32>, ${256 * QUADS}>;  // [quad][position of the tile and its border]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wid.y * p.row + wid.x;
    if (g >= p.count) {
        return;
    }
    let tile = g % p.tiles;
    let t = g / p.tiles;
    let block = t % p.blocks;
    let b = t / p.blocks;
    let y0 = (tile / p.tiles_x) * p.th;
    let x0 = (tile % p.tiles_x) * p.tw;
    let span = p.tw + 2u;
    let quads_out = (p.cout + 3u) / 4u;
    let q0 = block * ${QUADS}u;
    // the 1x1 at this thread's position of the tile and its border, for every quad of the block
    let iy = i32(y0 + lid / span) - 1;
    let ix = i32(x0 + lid % span) - 1;
#unroll q 0 QUADS
    var acc${q} = vec4<f32>(0.0);
#end
    var inside = iy >= 0 && ix >= 0 && iy < i32(p.h) && ix < i32(p.w);
    if (p.vh != 0u && inside) {
        let keep = mask_limits(b);
        inside = u32(iy) < keep.x && u32(ix) < keep.y;
    }
    if (inside) {
#if not POOLED
        var xi = b * p.cin * p.xhw + u32(iy) * p.xw + u32(ix);
#end
#if POOLED
        var xi = b * p.cin * p.xhw + 2u * (u32(iy) * p.xw + u32(ix));
#end
        // a quad past the last channel reads the zero weights packed for it
        let wi = q0 * p.cin;
        for (var ci = 0u; ci < p.cin; ci++) {
#if not POOLED
            let v = vec4<f32>(x[xi]);
#end
#if POOLED
            let v = vec4<f32>(max(max(x[xi], x[xi + 1u]), max(x[xi + p.xw], x[xi + p.xw + 1u])));
#end
#unroll q 0 QUADS
            acc${q} = fma(v, pw[wi + ${q}u * p.cin + ci], acc${q});
#end
            xi += p.xhw;
        }
        if (p.pw_bias != 0u) {
#unroll q 0 QUADS
            acc${q} += pw[p.pw_bias + q0 + ${q}u];
#end
        }
    }
#unroll q 0 QUADS
    mid[${q * 256}u + lid] = acc${q};
#end
    workgroupBarrier();
    // the depthwise window, one output position of the tile a thread
    let ly = lid / p.tw;
    let lx = lid % p.tw;
    let oy = y0 + ly;
    let ox = x0 + lx;
    if (ly >= p.th || oy >= p.h || ox >= p.w) {
        return;
    }
    let top = ly * span + lx;
    for (var q = 0u; q < ${QUADS}u; q++) {
        let quad = q0 + q;
        if (quad >= quads_out) {
            break;
        }
        var acc = vec4<f32>(0.0);
        let m0 = q * 256u + top;
        let w0 = quad * 9u;
        for (var ky = 0u; ky < 3u; ky++) {
            let m = m0 + ky * span;
            let wk = w0 + ky * 3u;
            acc = fma(mid[m], dwt[wk], acc);
            acc = fma(mid[m + 1u], dwt[wk + 1u], acc);
            acc = fma(mid[m + 2u], dwt[wk + 2u], acc);
        }
#if not HEADS
        let at0 = b * p.out_b + quad * 4u * p.out_c + (oy * p.w + ox) * p.out_p;
        for (var j = 0u; j < 4u; j++) {
            if (quad * 4u + j < p.cout) {
                let at = at0 + j * p.out_c;
                out[at] = finish(acc[j], quad * 4u + j, at);
            }
        }
#end
#if HEADS
        let pos = oy * p.w + ox;
        for (var j = 0u; j < 4u; j++) {
            let c = quad * 4u + j;
            if (c < p.cout) {
                let k = head_of(c);
                let at = p.heads[1][k] + b * p.heads[2][k] + (c - p.heads[0][k]) * p.heads[3][k] + pos * p.heads[4][k];
                out[at] = finish_head(acc[j], c, k, b, oy, ox);
            }
        }
#end
    }
}
