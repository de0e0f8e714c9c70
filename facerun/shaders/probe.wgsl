// The device's own limits, measured (facerun/gpu/probe.py): `copy` moves one buffer into another (memory
// bandwidth: every byte read once and written once), `chains` runs CHAINS independent vec4 fma chains per thread in
// registers (arithmetic rate; T is f32, or f16 where the device grants shader-f16). Both use a 2-D grid of
// workgroups folded into rows of `row` workgroups, 256 threads each.

struct Params {
    count: u32,  // copy: the vec4s to copy; fma: the loop's iterations
    row: u32,
    scale: f32,
    shift: f32,
}

#bindings x: vec4<f32> -> vec4<f32>

fn thread_index(wid: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * p.row + wid.x) * 256u + lid;
}

@compute @workgroup_size(256)
fn copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_index(wid, lid);
    if (i < p.count) {
        out[i] = x[i];
    }
}

// a <- a * scale + shift converges to shift / (1 - scale): with scale just under 1 every value stays finite in
// either type, and the uniform loop count keeps the compiler from folding the chains away
@compute @workgroup_size(256)
fn chains(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_index(wid, lid);
    let b = vec4<${T}>(${T}(p.scale));
    let c = vec4<${T}>(${T}(p.shift));
    let seed = f32(lid % 7u) * 0.125;
#unroll j 0 CHAINS
    var a${j} = vec4<${T}>(${T}(seed + ${j}.0 * 0.01));
#end
    for (var n = 0u; n < p.count; n++) {
#unroll r 0 UNROLL
#unroll j 0 CHAINS
        a${j} = fma(a${j}, b, c);
#end
#end
    }
    var s = vec4<f32>(0.0);
#unroll j 0 CHAINS
    s += vec4<f32>(a${j});
#end
    out[i] = s;
}
