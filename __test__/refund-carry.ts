// What sab-refund-carry.spec.ts and its worker (fixtures/refund-carry-worker.ts) share.

/** What the parent gives the worker. */
export interface RefundCarryData {
  buffer: SharedArrayBuffer;
  /** An Int32Array's buffer, its words indexed by {@link Control}. */
  control: SharedArrayBuffer;
}

/** The words of the control array. */
export const Control = {
  /** The shared clock, in milliseconds: every thread reads it, the parent advances it. */
  time: 0,
  /** The round the parent asks for; −1 to stop. */
  round: 1,
  /** The last round whose rotation the worker is watching for. */
  watching: 2,
  /** The last round whose rotation and carry the parent's call finished. */
  carried: 3,
  /** The last round the worker finished. */
  done: 4,
  /** Calls the worker made in the last round while the word said ROTATING. */
  during: 5,
} as const;
