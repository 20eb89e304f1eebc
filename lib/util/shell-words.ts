/**
 * Text for a terminal and a shell: a message or a debug line made printable, and a word
 * quoted so that a command a message prints (the CLI's hints, the library's "did you mean
 * …" for a store location) pastes back as that very argument.
 */
import { inspect } from 'node:util'

/**
 * `text` with no control character left to reach a terminal: a newline or carriage return
 * as `\n` or `\r`, any other C0 or C1 control and DEL as `\xHH`. Objects, listings and
 * the messages that quote them may hold an escape sequence (ESC, or the one-byte CSI
 * 0x9b) that would recolour, retitle or rewrite the user's terminal.
 */
export function printable(text: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what is replaced
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => {
    if (c === '\n') return '\\n'
    if (c === '\r') return '\\r'
    return `\\x${(c.codePointAt(0) as number).toString(16).padStart(2, '0')}`
  })
}

/**
 * `word` as a POSIX shell reads it back as one argument, for a command a message prints
 * for the user to paste (`stream-segment ls URL`): as it is when it holds nothing a shell
 * reads specially (nor starts with `=`, which zsh expands), else in single quotes (a quote
 * in it as `'\''`), or, when it holds a control character, in `$'…'` (bash, zsh, ksh)
 * with the escapes `printable` uses: the error line, made printable, still pastes as the
 * path.
 */
export function shellWord(word: string): string {
  if (/^[\w@%+:,./-][\w@%+=:,./-]*$/.test(word)) return word
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what is quoted
  if (!/[\u0000-\u001f\u007f-\u009f]/.test(word)) return `'${word.replaceAll("'", "'\\''")}'`
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what is escaped
  const escaped = word.replace(/[\\'\u0000-\u001f\u007f-\u009f]/g, (c) => {
    if (c === '\\' || c === "'") return `\\${c}`
    const n = c.codePointAt(0) as number
    // A C1 control is one code point, two bytes in UTF-8: \xHH would give one byte.
    return n >= 0x80 ? `\\u${n.toString(16).padStart(4, '0')}` : printable(c)
  })
  return `$'${escaped}'`
}

/** A `debug` logger, as far as the library uses one. */
export interface Logger {
  (...args: unknown[]): void
  readonly enabled: boolean
}

/**
 * `log` with its arguments made printable: a debug line quotes what error messages quote
 * (a store's URL or root, keys, paths, Node's and the SDK's messages) and goes to the same
 * terminal. A string is escaped as `printable` does; an Error, which `debug` prints as its
 * stack and fields, keeps its lines, each escaped, and its first (`name: message`) whole,
 * a newline in the message included. Other values go as they are (`debug` inspects an
 * object, and inspection escapes the strings in it).
 */
export function printableLog(log: Logger): Logger {
  const out = (...args: unknown[]) => {
    if (log.enabled) log(...args.map(printableArg))
  }
  return Object.defineProperty(out, 'enabled', { get: () => log.enabled }) as Logger
}

function printableArg(arg: unknown): unknown {
  if (typeof arg === 'string') return printable(arg)
  if (!(arg instanceof Error)) return arg
  const text = inspect(arg)
  const head = String(arg)
  const lines = (rest: string) => rest.split('\n').map(printable).join('\n')
  return text.startsWith(head) ? printable(head) + lines(text.slice(head.length)) : lines(text)
}
