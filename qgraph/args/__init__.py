"""args"""
