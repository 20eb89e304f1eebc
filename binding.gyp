{
  "targets": [
    {
      "target_name": "stream_segment_crc32",
      "sources": ["lib/native/crc32.c"],
      "cflags": ["-O3", "-Wall", "-Wextra"],
      "xcode_settings": { "OTHER_CFLAGS": ["-O3"] }
    }
  ]
}
