"""Pure parsers: kernel file text in, typed values out, ``ParseError`` on anything unexpected.

They never touch the filesystem, so hypothesis can fuzz them and fixtures can pin every quirk.
"""
