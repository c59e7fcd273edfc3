// The modules are typed `object` on purpose: the TypeScript consumers check keepcount's types
// themselves; ESM and CJS declarations of the same class are distinct types.
declare function exercise(keepcount: object, http: object, flavor: string): Promise<string>;
export = exercise;
