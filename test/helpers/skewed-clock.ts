/**
 * Loaded with `node --import <this file>` ahead of a program: moves the process's clock
 * (`Date.now()`, `new Date()`) by SKEW_MS milliseconds, as on a machine whose clock is
 * that far from the store's. Dates made from a value are left as they are.
 */
const skewMs = Number(process.env.SKEW_MS ?? 0)
if (!Number.isSafeInteger(skewMs)) throw new Error(`SKEW_MS must be an integer, got ${process.env.SKEW_MS}`)

const SystemDate = Date

class SkewedDate extends SystemDate {
  constructor(...args: ConstructorParameters<DateConstructor> | []) {
    if (args.length === 0) super(SystemDate.now() + skewMs)
    else super(...(args as ConstructorParameters<DateConstructor>))
  }

  static override now(): number {
    return SystemDate.now() + skewMs
  }
}

globalThis.Date = SkewedDate as DateConstructor
