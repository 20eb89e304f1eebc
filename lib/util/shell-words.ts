/**
 * Text for a terminal and a shell: a message made printable, and a word quoted so that a
 * command a message prints (the CLI's hints, the library's "did you mean …" for a store
 * location) pastes back as that very argument.
 */
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
