/**
 * What a synced limiter asks of a sync for one key: the tokens it holds and wants, and the
 * bucket's parameters, which the script needs since Redis keeps only the bucket's state. See the
 * bucket entry in script.ts.
 */
export interface LoanRequest {
  /** The bucket's Redis key. */
  readonly key: string;
  /** Tokens added per millisecond. */
  readonly rate: number;
  /** The tokens a new bucket starts with. */
  readonly burst: number;
  /** The most tokens in the bucket and on loan together. */
  readonly cap: number;
  /** Milliseconds the loan lasts unless renewed. */
  readonly leaseMs: number;
  /** Milliseconds the bucket's key lives after this sync (0: for ever). */
  readonly ttlMs: number;
  /** Tokens this node holds now (negative: borrowed on credit). */
  readonly held: number;
  /** Tokens it asks for, or −1 to give back what it holds and leave the bucket. */
  readonly want: number;
  /**
   * The sequence number of the last sync whose loan for this key the node took in, or, before
   * any, of the last sync before the node started asking for it: Redis gives a loan it made
   * after that, which the node never took (its sync gave up first), back to the bucket. A loan
   * Redis recorded for an earlier account of the key (forgotten, then asked for again) is before
   * it, so it is never given back twice.
   */
  readonly got: number;
  /**
   * Takes in the tokens lent by the sync numbered `seq`, after it succeeded, and the tokens `left`
   * in the bucket after that loan; it was sent at `sentAt` (`performance.now()`). `tokens` is −1
   * when Redis did not apply the request (its sequence number was stale: the script ran twice, the
   * first reply lost): nothing was lent by this run, and the node must not claim it took in
   * this sync's loan, so that Redis gives the first run's loan back.
   */
  lent(tokens: number, left: number, sentAt: number, seq: number): void;
  /** The sync failed: what the request reported (its demand) must go with the next one. */
  failed(): void;
  /**
   * Redis did not apply the request because it held this process's own sequence number `seq` for
   * the key, ahead of the sync: none the node sent (script.ts `SEQ_SPAN`). What the request
   * reported goes with the next one, as after {@link failed}, which is numbered past `seq` and
   * applies; `got` becomes `seq`, so that Redis does not give back the loan it recorded beside that
   * number: with the number gone, nothing tells whether the node took that loan in, and given back
   * after it was, it would be admitted twice. One it never took stays out (fewer admitted, never
   * more).
   */
  overtaken(seq: number): void;
}
