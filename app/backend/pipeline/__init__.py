"""The three-stage pipeline: stage interfaces (Thinker, Talker, Code2Wav), the stage workers that
batch across sessions, and the text segmenter feeding the Talker."""
