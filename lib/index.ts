export { crc32, crc32Implementation } from './crc32.js'
export { ERROR_CODES, type ErrorCode, StreamSegmentError } from './errors.js'
