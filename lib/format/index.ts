// The on-storage format: one module per layout, pure functions, no I/O.
export * from './header.js'
export * from './inode.js'
export * from './names.js'
export * from './node.js'
export * from './object.js'
export * from './pointer.js'
export * from './summary.js'
