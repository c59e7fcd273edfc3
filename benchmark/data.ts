/**
 * The key streams every suite draws from, generated once before anything is timed: `distinct`
 * distinct IPv4 addresses (as strings and as their u32 values), and `draws` picks from them,
 * uniform and Zipf(s = 1.1), from a seeded PRNG so every run and every contender sees the same
 * keys in the same order.
 */

/** mulberry32: a tiny seeded PRNG, good enough to draw keys. Returns floats in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface Keys {
  /** Distinct IPv4 addresses, dotted-quad strings. */
  ips: string[];
  /** The same addresses as integers (u32): the integer-key variant. */
  ints: number[];
  /** Uniform draws: indices into `ips`/`ints`. */
  uniform: Uint32Array;
  /** Zipf(s) draws: index 0 is the hottest key. */
  zipf: Uint32Array;
}

/** The Zipf exponent: roughly what request counts per client IP look like. */
export const ZIPF_S = 1.1;

export function makeKeys(distinct: number, draws: number, seed = 7): Keys {
  const random = prng(seed);
  const seen = new Set<number>();
  const ints: number[] = [];
  while (ints.length < distinct) {
    const v = Math.floor(random() * 4294967296);
    if (!seen.has(v)) {
      seen.add(v);
      ints.push(v);
    }
  }
  const ips = ints.map((v) => `${v >>> 24}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}`);
  const uniform = new Uint32Array(draws);
  for (let i = 0; i < draws; i++) uniform[i] = Math.floor(random() * distinct);
  // Zipf by inverse CDF: P(rank k) ∝ 1 / k^s, ranks 1..distinct, binary search per draw.
  const cdf = new Float64Array(distinct);
  let total = 0;
  for (let k = 0; k < distinct; k++) cdf[k] = total += 1 / Math.pow(k + 1, ZIPF_S);
  const zipf = new Uint32Array(draws);
  for (let i = 0; i < draws; i++) {
    const u = random() * total;
    let lo = 0;
    let hi = distinct - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    zipf[i] = lo;
  }
  return { ips, ints, uniform, zipf };
}

/** The stream of keys a suite feeds a contender, materialised so the loop only indexes an array. */
export function stream<K>(keys: K[], draws: Uint32Array): K[] {
  return Array.from(draws, (i) => keys[i]!);
}
