/**
 * A signal that fires when `parent` does (one already fired is ignored: the caller decided
 * to go on regardless) or once `ms` have passed (none when `ms` ≤ 0), whichever comes
 * first, with `timeoutReason()` as its reason then. `done()` lets go of both: the listener
 * on `parent` removed, the timer cleared. Not AbortSignal.any: on Node 20 each signal it
 * makes stays referenced from its sources as long as they live, and a file's own signal,
 * given to every request it makes, lives as long as the file.
 */
export function signalWithin(
  parent: AbortSignal | undefined,
  ms: number,
  timeoutReason: () => unknown,
): { signal: AbortSignal; timedOut: () => boolean; done: () => void } {
  const both = new AbortController()
  const onAbort = () => both.abort(parent?.reason)
  if (parent?.aborted === false) parent.addEventListener('abort', onAbort, { once: true })
  let timedOut = false
  const timer =
    ms > 0
      ? setTimeout(() => {
          timedOut = true
          both.abort(timeoutReason())
        }, ms).unref()
      : undefined
  return {
    signal: both.signal,
    timedOut: () => timedOut,
    done: () => {
      parent?.removeEventListener('abort', onAbort)
      clearTimeout(timer)
    },
  }
}

/**
 * A signal that fires `ms` after `parent` does (after it already has: `ms` from now), with
 * its reason: for the request that makes a write visible, whose answer an abort waits for,
 * cut only when the store does not give it in time. `done()` lets go of `parent` and the timer.
 * The timer is not unref'd: a store with nothing of its own to keep the process alive (the
 * memory store) would otherwise let it exit while the answer is waited for.
 */
export function signalAfter(parent: AbortSignal | undefined, ms: number): { signal: AbortSignal; done: () => void } {
  const own = new AbortController()
  let timer: NodeJS.Timeout | undefined
  const onAbort = () => {
    timer = setTimeout(() => own.abort(parent?.reason), ms)
  }
  if (parent?.aborted === true) onAbort()
  else parent?.addEventListener('abort', onAbort, { once: true })
  return {
    signal: own.signal,
    done: () => {
      parent?.removeEventListener('abort', onAbort)
      clearTimeout(timer)
    },
  }
}

/**
 * `work`'s outcome, or a rejection with `signal`'s reason as soon as it fires, whichever
 * comes first: a caller that is stopped is not held by work that does not hear the signal
 * (a custom store's request, a read blocked on a hung mount). A value `work` gives after
 * that goes to `late` (a handle to close, say); a failure after it is let go.
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal, late?: (value: T) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      work.then(late, () => undefined)
      reject(signal.reason)
    }
    if (signal.aborted) return onAbort()
    signal.addEventListener('abort', onAbort, { once: true })
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort)
        resolve(value)
      },
      (err) => {
        signal.removeEventListener('abort', onAbort)
        reject(err)
      },
    )
  })
}
