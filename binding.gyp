{
  "targets": [
    {
      "target_name": "stream_segment_crc32",
      "sources": ["lib/native/crc32.c"],
      "cflags": ["-O3", "-Wall", "-Wextra"],
      "xcode_settings": { "OTHER_CFLAGS": ["-O3"] }
    },
    {
      "target_name": "stream_segment_memory",
      "sources": ["lib/native/memory.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
