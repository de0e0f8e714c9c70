// A 1x1 convolution and the depthwise 3x3 (stride 1, padding 1) reading it, in one pass (plan.SeparablePlan). A
// workgroup owns a th x tw tile of output positions for 4 * quads channels of one image: it first makes the 1x1's
// outputs over the tile and a one-position border into workgroup memory (0 outside the image and past the mask, as
// the 1x1's own masked output and the depthwise's zero padding would be there), then each thread takes one output
// position through the 3x3 window and the epilogue. The 1x1's output never goes to device memory.

struct Params {
#fields epilogue
    count: u32,  // workgroups in all: tiles * blocks * batch
    row: u32,
    cin: u32,  // the 1x1's input channels
    cout: u32,  // channels of the 1x1's output and of the depthwise's
    h: u32,  // rows and columns of both outputs (and of the 1x1's input)
    w: u32,
    th: u32,  // the tile: th * tw = 256 output positions
    tw: u32,
    tiles_x: u32,
    tiles: u32,
    blocks: u32,  // channel blocks of 4 * quads
    quads: u32,
    pw_bias: u32,  // where the 1x1's bias starts in `pw` (after its weights), or 0: none
    out_b: u32,  // output element strides of batch, channel and position: NCHW, or NHWC when a transpose was fused
    out_c: u32,
    out_p: u32,
}

// x: the 1x1's input NCHW; pw: its weights by channel quad (pw[q * cin + ci] = w[4q..4q+3, ci]), then its bias by
// quad; dwt: the depthwise weights by quad and tap (dwt[q * 9 + tap])
#bindings x, pw: vec4<f32>, epi, res, dwt: vec4<f32>

const HALO: u32 = 340u;  // plan.SEPARABLE_MAX_HALO
var<workgroup> mid: array<vec4<f32>, 680>;  // HALO * plan.SEPARABLE_MAX_QUADS

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
    let hw = p.h * p.w;
    let span = p.tw + 2u;
    let halo = (p.th + 2u) * span;
    let quads_out = (p.cout + 3u) / 4u;
    // the 1x1 over the tile and its border: an item is (quad, position)
    for (var item = lid; item < halo * p.quads; item += 256u) {
        let q = item / halo;
        let at = item % halo;
        let iy = i32(y0 + at / span) - 1;
        let ix = i32(x0 + at % span) - 1;
        let quad = block * p.quads + q;
        var acc = vec4<f32>(0.0);
        var inside = iy >= 0 && ix >= 0 && iy < i32(p.h) && ix < i32(p.w) && quad < quads_out;
        if (p.vh != 0u && inside) {
            inside = u32(iy) < p.vh && u32(ix) < p.vw;
        }
        if (inside) {
            var xi = b * p.cin * hw + u32(iy) * p.w + u32(ix);
            let wi = quad * p.cin;
            for (var ci = 0u; ci < p.cin; ci++) {
                acc = fma(vec4<f32>(x[xi]), pw[wi + ci], acc);
                xi += hw;
            }
            if (p.pw_bias != 0u) {
                acc += pw[p.pw_bias + quad];
            }
        }
        mid[q * HALO + at] = acc;
    }
    workgroupBarrier();
    // the depthwise window, one output position a thread
    let oy = y0 + lid / p.tw;
    let ox = x0 + lid % p.tw;
    if (oy >= p.h || ox >= p.w) {
        return;
    }
    let top = (lid / p.tw) * span + lid % p.tw;
    for (var q = 0u; q < p.quads; q++) {
        let quad = block * p.quads + q;
        if (quad >= quads_out) {
            break;
        }
        var acc = vec4<f32>(0.0);
        let m0 = q * HALO + top;
        let w0 = quad * 9u;
        for (var ky = 0u; ky < 3u; ky++) {
            let m = m0 + ky * span;
            let wk = w0 + ky * 3u;
            acc = fma(mid[m], dwt[wk], acc);
            acc = fma(mid[m + 1u], dwt[wk + 1u], acc);
            acc = fma(mid[m + 2u], dwt[wk + 2u], acc);
        }
        let at0 = b * p.out_b + quad * 4u * p.out_c + (oy * p.w + ox) * p.out_p;
        for (var j = 0u; j < 4u; j++) {
            if (quad * 4u + j < p.cout) {
                let at = at0 + j * p.out_c;
                out[at] = finish(acc[j], quad * 4u + j, at);
            }
        }
    }
}
