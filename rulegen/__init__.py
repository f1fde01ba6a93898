"""rulegen"""
