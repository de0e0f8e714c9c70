// A batch of photos' bytes -> a batch program's input: out[n, c, y, x] as image.wgsl lays out one photo, for every
// item n at once. The bytes buffer starts with a header of four words an item (rows h, columns w, bytes a pixel,
// the word where its packed rows start); an item of 0 rows is all zeros (a batch padded to the program's items).

struct Params {
    total: u32,
    row: u32,
    ph: u32,
    pw: u32,
    bgr: u32,
}

#bindings x: u32

#per_value main total
    let plane = p.ph * p.pw;
    let n = i / (3u * plane);
    let j = i % (3u * plane);
    let xo = j % p.pw;
    let yo = (j / p.pw) % p.ph;
    let c = j / plane;
    let h = x[4u * n];
    let w = x[4u * n + 1u];
    var v = 0.0;
    if (yo < h && xo < w) {
        let channel = select(c, 2u - c, p.bgr != 0u);
        let byte = (yo * w + xo) * x[4u * n + 2u] + channel;
        v = f32((x[x[4u * n + 3u] + byte / 4u] >> ((byte % 4u) * 8u)) & 0xffu);
    }
    out[i] = v;
}
