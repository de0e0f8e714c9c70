// Faces -> an embedder's input: out[n, c, y, x] = (s - mean[c]) / std[c], s the crop pixel (x, y) of face n as
// face/align.py's warp makes it: its region sampled bilinearly at (a x + b y + c, d x + e y + f), rounded to a whole
// level. The bytes buffer starts with a header of eight words a face (the region's columns and rows, the word where
// its bytes start (rows of R, G, B uint8, packed four to a word), a word unused, then a, b, c, d as f32 bits) and
// two more a face after all of those (e, f); a face of no columns is all zeros (a batch padded to the program's).

struct Params {
    total: u32,
    row: u32,
    h: u32,
    w: u32,
    bgr: u32,
    faces: u32,
    mean0: f32,
    mean1: f32,
    mean2: f32,
    std0: f32,
    std1: f32,
    std2: f32,
}

#bindings x: u32

fn level(start: u32, cols: u32, r: u32, q: u32, channel: u32) -> f32 {
    let byte = (r * cols + q) * 3u + channel;
    return f32((x[start + byte / 4u] >> ((byte % 4u) * 8u)) & 0xffu);
}

#per_value main total
    let plane = p.h * p.w;
    let n = i / (3u * plane);
    let j = i % (3u * plane);
    let xo = f32(j % p.w);
    let yo = f32((j / p.w) % p.h);
    let c = j / plane;
    let head = 8u * n;
    let cols = x[head];
    let rows = x[head + 1u];
    var v = 0.0;
    if (cols >= 2u && rows >= 2u) {
        let tail = 8u * p.faces + 2u * n;
        let sx = xo * bitcast<f32>(x[head + 4u]) + yo * bitcast<f32>(x[head + 5u]) + bitcast<f32>(x[head + 6u]);
        let sy = xo * bitcast<f32>(x[head + 7u]) + yo * bitcast<f32>(x[tail]) + bitcast<f32>(x[tail + 1u]);
        // the region holds every neighbour: a point a rounding outside it is held at its edge
        let fx0 = clamp(floor(sx), 0.0, f32(cols - 2u));
        let fy0 = clamp(floor(sy), 0.0, f32(rows - 2u));
        let fx = clamp(sx - fx0, 0.0, 1.0);
        let fy = clamp(sy - fy0, 0.0, 1.0);
        let x0 = u32(fx0);
        let y0 = u32(fy0);
        let channel = select(c, 2u - c, p.bgr != 0u);
        let start = x[head + 2u];
        let top = level(start, cols, y0, x0, channel) * (1.0 - fx) + level(start, cols, y0, x0 + 1u, channel) * fx;
        let bottom = level(start, cols, y0 + 1u, x0, channel) * (1.0 - fx)
            + level(start, cols, y0 + 1u, x0 + 1u, channel) * fx;
        let s = clamp(round(top * (1.0 - fy) + bottom * fy), 0.0, 255.0);
        let mean = select(select(p.mean0, p.mean1, c == 1u), p.mean2, c == 2u);
        let spread = select(select(p.std0, p.std1, c == 1u), p.std2, c == 2u);
        v = (s - mean) / spread;
    }
    out[i] = v;
}
