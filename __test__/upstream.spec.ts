/** `UpstreamLimit` on its own, without a server: what the HTTP adapters build on. */
import test from 'ava';
import { Inflight } from '../lib/index.js';
import { UpstreamLimit } from '../lib/http/index.js';
import { throwsShape, title } from './helpers.js';

test(
  title('UpstreamLimit.enter counts in without a guard; its release is idempotent and a refusal holds nothing'),
  (t) => {
    const limit = new UpstreamLimit({ max: 2 });
    const [a, b, over] = [limit.enter('origin'), limit.enter('origin'), limit.enter('origin')];
    t.deepEqual([a.allowed, b.allowed, over.allowed], [true, true, false]);
    t.deepEqual([a.count, b.count, over.count], [1, 2, 3]);
    t.is(limit.inflight.get('origin'), 2, 'the refused one left at once');
    over.release();
    a.release();
    a.release();
    t.is(limit.inflight.get('origin'), 1, 'releasing twice, or a refused slot, takes nothing more');
    b.release();
    t.is(limit.inflight.get('origin'), 0);
    t.deepEqual(limit.decisions(), { allowed: 2, refused: 1 });
    // A counter with only incr and get is acquired through its guards.
    const inflight = new Inflight();
    const guarded = new UpstreamLimit({
      max: 1,
      inflight: { incr: (key: string) => inflight.incr(key), get: (key: string) => inflight.get(key) },
    });
    const slot = guarded.enter('origin');
    t.is(guarded.enter('origin').allowed, false);
    t.is(inflight.get('origin'), 1);
    slot.release();
    slot.release();
    t.is(inflight.get('origin'), 0);
  },
);

test(title('UpstreamLimit: a call whose upstream the counter refuses leaves its client uncounted'), (t) => {
  // A counter that throws on an upstream key (a remote one that failed, say): the client was
  // counted in before, and must be let go, or each such call holds it for good.
  const inflight = new Inflight();
  const refuse = (key: string): void => {
    if (key === 'bad') throw Object.assign(new Error('refused'), { code: 'E_TEST_COUNTER' });
  };
  const counter = {
    incr: (key: string) => (refuse(key), inflight.incr(key)),
    get: (key: string) => inflight.get(key),
    enter: (key: string) => (refuse(key), inflight.enter(key)),
    leave: (key: string) => inflight.leave(key),
  };
  const limit = new UpstreamLimit({ max: 5, perClient: 2, inflight: counter });
  for (const method of ['enter', 'acquire'] as const) {
    for (let i = 0; i < 3; i++) t.throws(() => limit[method]('bad', 'client'), { code: 'E_TEST_COUNTER' });
    t.is(limit.clientCount('bad', 'client'), 0, method);
  }
  const slot = limit.enter('origin', 'client');
  t.true(slot.allowed);
  t.is(limit.clientCount('origin', 'client'), 1);
  slot.release();
  t.is(limit.clientCount('origin', 'client'), 0);
});

test(title('UpstreamLimit: a counter whose incr() answers no [guard, count] pair leaves its client uncounted'), (t) => {
  // A user's counter answering `null` while its store is down, or a guard that cannot release: a
  // TypeError, and the client counted in for the call goes out again, or it is held for good.
  const inflight = new Inflight();
  let answer: (key: string) => unknown = () => null;
  const counter = { incr: (key: string) => answer(key), get: (key: string) => inflight.get(key) };
  const limit = new UpstreamLimit({ max: 1, perClient: 1, inflight: counter as never });
  for (const bad of [null, { guard: {}, count: 1 }, [null, 1], [{ release: () => {} }, '1'], []]) {
    answer = () => bad;
    throwsShape(t, () => limit.acquire('origin', 'client'), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /"inflight" option's incr\(\) result must be a \[guard, count\] pair/,
    });
    t.is(limit.clientCount('origin', 'client'), 0);
  }
  // A refusal whose guard throws on release still lets the client go.
  answer = () => [
    {
      release: () => {
        throw new Error('store down');
      },
    },
    2,
  ];
  t.throws(() => limit.acquire('origin', 'client'), { message: 'store down' });
  t.is(limit.clientCount('origin', 'client'), 0);
  answer = (key) => inflight.incr(key);
  const slot = limit.acquire('origin', 'client');
  t.true(slot.allowed);
  slot.release();
  t.is(limit.clientCount('origin', 'client'), 0);
  // The same check on the clientInflight counter's incr().
  const clients = new UpstreamLimit({
    max: 5,
    perClient: 1,
    clientInflight: { incr: () => [null, 1], get: () => 0 } as never,
  });
  throwsShape(t, () => clients.acquire('origin', 'client'), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /"clientInflight" option's incr\(\) result/,
  });
  t.is(clients.inflight.get('origin'), 0);
});

test(title('UpstreamLimit refuses an upstream key that is not a string, so clients stay apart'), (t) => {
  // As numbers, upstream 1 for client 12.0.0.1 and upstream 11 for client 2.0.0.1 would read as
  // one per-client entry: the second client refused for the first one's calls.
  const limit = new UpstreamLimit({ max: 5, perClient: 1 });
  const notString = { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE', message: /must be of type string/ };
  for (const key of [1, 11, 1n, undefined, null, Buffer.from('a')] as unknown as string[]) {
    for (const method of ['enter', 'acquire'] as const) {
      t.throws(() => limit[method](key, '2.0.0.1'), notString);
      t.throws(() => limit[method](key), notString);
    }
    t.throws(() => limit.clientCount(key, '2.0.0.1'), notString);
  }
  t.throws(() => limit.clientCount('1', 12 as unknown as string), notString);
  t.is(limit.inflight.get('1'), 0, 'nothing was counted');
  const first = limit.enter('1', '12.0.0.1');
  t.true(first.allowed);
  t.true(limit.enter('11', '2.0.0.1').allowed, 'string keys keep the two apart');
  t.is(limit.clientCount('11', '2.0.0.1'), 1);
});

test(title('UpstreamLimit over an Inflight closed mid-call: the slots taken before release quietly'), (t) => {
  // The HTTP adapters release a slot when its exchange ends: a throw there would be an uncaught
  // exception in a 'close' listener. Calls after the close fail with the counter's error instead.
  const inflight = new Inflight();
  const limit = new UpstreamLimit({ max: 5, perClient: 2, inflight });
  const entered = limit.enter('origin', 'client');
  const acquired = limit.acquire('origin', 'client');
  t.is(inflight.get('origin'), 2);
  inflight.close();
  t.notThrows(() => entered.release());
  t.notThrows(() => acquired.release());
  t.is(limit.clientCount('origin', 'client'), 0);
  for (const method of ['enter', 'acquire'] as const) {
    t.throws(() => limit[method]('origin', 'client'), { code: 'ERR_KEEPCOUNT_CLOSED' });
  }
  t.is(limit.clientCount('origin', 'client'), 0);
});

test(title('UpstreamLimit.close closes the Inflight it made; slots held then release as no-ops'), (t) => {
  const limit = new UpstreamLimit({ max: 5, perClient: 2 });
  const entered = limit.enter('origin', 'client');
  const acquired = limit.acquire('origin', 'client');
  limit.close();
  limit.close();
  t.throws(() => limit.inflight.get('origin'), { code: 'ERR_KEEPCOUNT_CLOSED' }, 'its counters are freed');
  t.notThrows(() => entered.release());
  t.notThrows(() => acquired.release());
  t.is(limit.clientCount('origin', 'client'), 0);
  for (const method of ['enter', 'acquire'] as const) {
    throwsShape(t, () => limit[method]('origin', 'client'), {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_CLOSED',
      message: 'This UpstreamLimit was closed; its counters are gone',
    });
  }
  t.is(limit.clientCount('origin', 'client'), 0, 'a refused call holds no client');
  t.deepEqual(limit.decisions(), { allowed: 2, refused: 0 });
});

test(title('UpstreamLimit.close (and `using`) leaves a given counter open: held slots still give back'), (t) => {
  // The counter may be shared with other limits or processes (Inflight.openShared): a slot held
  // across the close must still leave it, or the shared count stays high for good.
  const inflight = new Inflight();
  let escaped: UpstreamLimit | undefined;
  let entered;
  let acquired;
  {
    using limit = new UpstreamLimit({ max: 5, inflight });
    entered = limit.enter('origin');
    acquired = limit.acquire('origin');
    escaped = limit;
  }
  t.is(inflight.get('origin'), 2);
  t.throws(() => escaped.enter('origin'), { code: 'ERR_KEEPCOUNT_CLOSED' });
  t.is(inflight.get('origin'), 2, 'the refused call was not counted');
  entered.release();
  acquired.release();
  t.is(inflight.get('origin'), 0);
  t.deepEqual(inflight.enter('other'), 1, 'the counter itself is open');
});
