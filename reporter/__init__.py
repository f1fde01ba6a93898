"""reporter"""
