// The modules are typed `object` on purpose: the TypeScript consumers check keepcount's types
// themselves, this only runs them.
declare function exercise(keepcount: object, http: object, flavor: string): Promise<string>;
export = exercise;
