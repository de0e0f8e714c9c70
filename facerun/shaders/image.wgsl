// A photo's bytes -> a network's input: out[c, y, x] (channels first, float, zero-padded at the bottom and right)
// from the packed rows of an h x w RGB uint8 image (p.pixel bytes a pixel: 3, packed four to a word, or 4 with the
// last unread), channels reversed when p.bgr is set. What yunet.make_blob does on the CPU, from a quarter of the
// bytes.

struct Params {
    total: u32,
    row: u32,
    h: u32,
    w: u32,
    ph: u32,
    pw: u32,
    bgr: u32,
    pixel: u32,
}

#bindings x: u32

#per_value main total
    let xo = i % p.pw;
    let yo = (i / p.pw) % p.ph;
    let c = i / (p.pw * p.ph);
    var v = 0.0;
    if (yo < p.h && xo < p.w) {
        let channel = select(c, 2u - c, p.bgr != 0u);
        let byte = (yo * p.w + xo) * p.pixel + channel;
        v = f32((x[byte / 4u] >> ((byte % 4u) * 8u)) & 0xffu);
    }
    out[i] = v;
}
