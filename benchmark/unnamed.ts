/**
 * `f` itself, for functions the bench makes per request or per call. The bench runs under tsx,
 * which compiles with esbuild's `keepNames`: a function bound to a name where it is made (`const
 * next = () => …`) is wrapped in a `__name()` call, an `Object.defineProperty` on every new
 * function, ~1.5 µs a request in the node:http servers and ~0.4 µs a call in the timeout suite,
 * which built code (what users run) never pays. A function passed to a call is bound to no name,
 * so esbuild leaves it alone.
 */
export const unnamed = <F>(f: F): F => f;
